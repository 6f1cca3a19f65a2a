package proxy

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/soapgw/soapgw/internal/spool"
)

// oneWayMetrics are the collectors of one-way messaging (oneway_edge.go, oneway_origin.go).
type oneWayMetrics struct {
	accepted   *prometheus.CounterVec // edge, by upstream
	rejected   *prometheus.CounterVec // edge, by cause
	deliveries *prometheus.CounterVec // edge, by result
	spooled    *prometheus.GaugeVec   // edge: messages, bytes, dead_letters
	oldestAge  prometheus.Gauge       // edge
	delay      prometheus.Histogram   // edge: acknowledged -> delivered
	origin     *prometheus.CounterVec // origin, by result
}

// oneWayDelayBuckets span a delivery on a fast link (milliseconds) to one held by an
// outage of an hour.
var oneWayDelayBuckets = []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// oneWayEdgeResults are the results of one delivery attempt as the edge's forwarder sees
// them.
var oneWayEdgeResults = []string{"delivered", "duplicate", "refused", "in_doubt", "retry"}

// oneWayOriginResults are the outcomes of one delivery at the origin.
var oneWayOriginResults = []string{"delivered", "not_taken", "not_sent", "in_doubt", "ledger_error",
	causeAlreadyDelivered, causeDeliveryInProgress, causeDeliveryInDoubt, causeOneWayOff, causeInternal}

func newOneWayMetrics() *oneWayMetrics {
	m := &oneWayMetrics{
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_oneway_accepted_total",
			Help: "One-way messages the edge synced to its spool and acknowledged to the client, by upstream.",
		}, []string{"upstream"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_oneway_rejected_total",
			Help: "One-way messages the edge refused with a Fault instead of acknowledging them, by cause (spool_full, spool_error).",
		}, []string{"cause"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_oneway_deliveries_total",
			Help: "Delivery attempts of spooled one-way messages by result: delivered (the server took it), duplicate (the origin had delivered it before; suppressed), refused (the server answered with a Fault or an error; dead letter), in_doubt (an earlier attempt's outcome is unknown; dead letter), retry (not delivered this time; kept).",
		}, []string{"result"}),
		spooled: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "soapgw_oneway_spool",
			Help: "The edge's one-way spool: pending messages (what=messages), their bytes (what=bytes), dead letters (what=dead_letters).",
		}, []string{"what"}),
		oldestAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "soapgw_oneway_oldest_age_seconds",
			Help: "Age of the oldest pending message in the edge's one-way spool (0 when empty).",
		}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "soapgw_oneway_delivery_delay_seconds",
			Help:    "Time from the edge's acknowledgement of a one-way message to the server's acceptance of it, of messages delivered (retries and outages included).",
			Buckets: oneWayDelayBuckets,
		}),
		origin: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_origin_oneway_total",
			Help: "One-way deliveries at the origin by result: delivered, not_taken (the server answered 408/429/502/503/504), not_sent (failed before the whole request reached the server), in_doubt (sent whole, no answer), ledger_error, or the refusal's cause (already_delivered: a duplicate suppressed, delivery_in_progress, delivery_in_doubt, one_way_off, internal).",
		}, []string{"result"}),
	}
	for _, r := range oneWayEdgeResults {
		m.deliveries.WithLabelValues(r)
	}
	for _, r := range oneWayOriginResults {
		m.origin.WithLabelValues(r)
	}
	for _, w := range []string{"messages", "bytes", "dead_letters"} {
		m.spooled.WithLabelValues(w)
	}
	for _, c := range []string{causeSpoolFull, causeSpoolError} {
		m.rejected.WithLabelValues(c)
	}
	return m
}

func (m *oneWayMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.accepted, m.rejected, m.deliveries, m.spooled, m.oldestAge, m.delay, m.origin}
}

// observe sets the spool gauges.
func (m *oneWayMetrics) observe(st spool.Stats) {
	m.spooled.WithLabelValues("messages").Set(float64(st.Messages))
	m.spooled.WithLabelValues("bytes").Set(float64(st.Bytes))
	m.spooled.WithLabelValues("dead_letters").Set(float64(st.Dead))
	age := 0.0
	if !st.Oldest.IsZero() {
		age = time.Since(st.Oldest).Seconds()
	}
	m.oldestAge.Set(age)
}
