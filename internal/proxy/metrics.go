package proxy

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the proxy's Prometheus collectors, registered on the caller's registry.
type Metrics struct {
	ops           *labelSet // bounds the operation label
	exchanges     *prometheus.CounterVec
	faults        *prometheus.CounterVec
	connsTotal    prometheus.Counter
	gatewayErrors *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	bytes         *prometheus.CounterVec
	clientConns   prometheus.Gauge
	connsRefused  prometheus.Counter
	tlsFailures   *prometheus.CounterVec // client TLS handshakes that failed, by listener and reason
	retries       *prometheus.CounterVec
	upstreamConns *prometheus.CounterVec
	pinnedConns   *prometheus.GaugeVec // upstream connections pinned to a client's affinity key
	pinsEvicted   *prometheus.CounterVec
	readAhead     prometheus.Gauge // bytes of responses queued ahead of a slow tunnel
	diverted      *prometheus.CounterVec
	held          *heldMetrics   // resumes, and the origin's held responses
	oneWay        *oneWayMetrics // one-way messages: the edge's spool, deliveries
	oneWayOrigin  *prometheus.CounterVec

	// The series every exchange touches, resolved once: a vector's lookup validates,
	// hashes and compares every label value on each call (about 2 % of a gateway's CPU).
	exchangeSeries seriesCache[exchangeKey, exchangeSeries]
	byteSeries     seriesCache[[2]string, prometheus.Counter]
}

type exchangeKey struct {
	role, upstream, op, outcome string
	status                      int
}

type exchangeSeries struct {
	count    prometheus.Counter
	duration prometheus.Observer
}

// seriesCache maps label values to the series a vector gave for them. Its keys are the
// vector's label values (bounded as the vector's are), so it grows no more than the vector.
type seriesCache[K comparable, V any] struct {
	mu sync.RWMutex
	m  map[K]V
}

// get returns the series for k, made by resolve the first time.
func (c *seriesCache[K, V]) get(k K, resolve func(K) V) V {
	c.mu.RLock()
	v, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return v
	}
	v = resolve(k)
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[K]V)
	}
	c.m[k] = v
	c.mu.Unlock()
	return v
}

// addBytes counts HTTP message bytes of role in direction (soapgw_http_bytes_total).
func (m *Metrics) addBytes(role, direction string, n int64) {
	m.byteSeries.get([2]string{role, direction}, func(k [2]string) prometheus.Counter {
		return m.bytes.WithLabelValues(k[0], k[1])
	}).Add(float64(n))
}

// NewMetrics creates the proxy collectors and registers them on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		ops: newLabelSet(maxOperations),
		exchanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_exchanges_total",
			Help: "SOAP exchanges by role, upstream, SOAP operation (at most 100 names, then \"other\"), HTTP status code (for soapgw's own Faults the HTTP-semantic status of X-Soapgw-Status, whatever limits.fault_status sent) and outcome (ok, soap_fault, server_error, gateway_error; spooled: a one-way message the edge acknowledged from its spool).",
		}, []string{"role", "upstream", "operation", "code", "outcome"}),
		faults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_soap_faults_total",
			Help: "SOAP Faults by role, upstream, source (server: answered by the service; gateway: made by soapgw) and fault code (Server, Client, Receiver, Sender, VersionMismatch, MustUnderstand, DataEncodingUnknown, other).",
		}, []string{"role", "upstream", "source", "code"}),
		connsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "soapgw_edge_client_connections_total",
			Help: "Client connections accepted by the edge: each is a TCP handshake (and teardown) that did not cross the link to the origin.",
		}),
		gatewayErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_gateway_errors_total",
			Help: "Errors made by the gateway (not the server), by the role that detected them and cause.",
		}, []string{"role", "cause"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "soapgw_exchange_duration_seconds",
			Help:    "Exchange duration: end to end at the edge, upstream call at the origin.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"role", "upstream"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_http_bytes_total",
			Help: "HTTP message bytes (head and body) exchanged with clients (edge) or servers (origin).",
		}, []string{"role", "direction"}),
		clientConns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "soapgw_edge_client_connections",
			Help: "Client connections currently open at the edge.",
		}),
		tlsFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_edge_tls_handshake_failures_total",
			Help: "Client TLS handshakes that failed on an HTTPS listener, by listener and reason (plain_http: the client spoke plain HTTP; timeout; closed: the client left; refused: any other failure, such as no shared version or cipher, or a missing or untrusted client certificate: the edge log names it).",
		}, []string{"listener", "reason"}),
		connsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "soapgw_edge_client_connections_refused_total",
			Help: "Client connections the edge answered with a too_many_connections Fault (HTTP-semantic status 503) and closed because limits.max_client_connections were open.",
		}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_edge_retries_total",
			Help: "Exchanges sent again because the tunnel refused them before the origin saw them.",
		}, []string{"peer"}),
		upstreamConns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_origin_upstream_connections_total",
			Help: "Connections the origin opened to upstream servers (reused ones are not counted).",
		}, []string{"upstream"}),
		pinnedConns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "soapgw_origin_pinned_connections",
			Help: "Idle upstream connections the origin keeps for one client connection each, because they authenticated with NTLM or Negotiate (at most 256 per upstream), by upstream.",
		}, []string{"upstream"}),
		pinsEvicted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_origin_pins_evicted_total",
			Help: "Pinned upstream connections closed to make room for a new one when 256 were pinned (the one idle longest goes), by upstream.",
		}, []string{"upstream"}),
		readAhead: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "soapgw_origin_readahead_bytes",
			Help: "Bytes of upstream responses the origin has read and queued for a tunnel slower than the server (in 32 KiB chunks; at most 64 MiB, 8 MiB per response).",
		}),
		diverted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_origin_responses_diverted_total",
			Help: "Large responses the origin sent over the edge's TCP tunnel instead of the UDP tunnel stream of their request, because the UDP path was losing packets (fallback tcp at the edge), by upstream.",
		}, []string{"upstream"}),
		held:   newHeldMetrics(),
		oneWay: newOneWayMetrics(),
	}
	m.oneWayOrigin = m.oneWay.origin
	// Create every error series at 0, so the first error shows in increase() and rate()
	// instead of being hidden as the series' first sample.
	for _, role := range []string{"edge", "origin"} {
		for _, cause := range allCauses {
			m.gatewayErrors.WithLabelValues(role, cause)
		}
	}
	if reg != nil {
		reg.MustRegister(m.exchanges, m.faults, m.connsTotal, m.gatewayErrors, m.duration, m.bytes, m.clientConns, m.connsRefused, m.tlsFailures, m.retries, m.upstreamConns, m.pinnedConns, m.pinsEvicted, m.readAhead, m.diverted)
		reg.MustRegister(m.held.collectors()...)
		reg.MustRegister(m.oneWay.collectors()...)
	}
	return m
}

// maxOperations bounds the distinct SOAP operation names used as label values.
const maxOperations = 100

// exchange records one finished exchange.
func (m *Metrics) exchange(role, upstream, op string, status int, outcome string, d time.Duration) {
	if upstream == "" {
		upstream = "none"
	}
	k := exchangeKey{role: role, upstream: upstream, op: m.ops.label(op), outcome: outcome, status: status}
	series := m.exchangeSeries.get(k, func(k exchangeKey) exchangeSeries {
		return exchangeSeries{
			count:    m.exchanges.WithLabelValues(k.role, k.upstream, k.op, strconv.Itoa(k.status), k.outcome),
			duration: m.duration.WithLabelValues(k.role, k.upstream),
		}
	})
	series.count.Inc()
	if d > 0 {
		series.duration.Observe(d.Seconds())
	}
}

// fault records a SOAP Fault seen (source "server") or made (source "gateway").
func (m *Metrics) fault(role, upstream, source, code string) {
	if upstream == "" {
		upstream = "none"
	}
	m.faults.WithLabelValues(role, upstream, source, faultLabel(code)).Inc()
}

// serverOutcome classifies a response the service answered: a 5xx carrying a SOAP Fault
// is a soap_fault, another 5xx a server_error.
func serverOutcome(status int, faultCode string) string {
	switch {
	case status < 500:
		return "ok"
	case faultCode != "":
		return "soap_fault"
	}
	return "server_error"
}
