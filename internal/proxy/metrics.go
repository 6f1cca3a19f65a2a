package proxy

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the proxy's Prometheus collectors, registered on the caller's registry.
type Metrics struct {
	exchanges     *prometheus.CounterVec
	gatewayErrors *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	bytes         *prometheus.CounterVec
	clientConns   prometheus.Gauge
	retries       *prometheus.CounterVec
	upstreamConns *prometheus.CounterVec
}

// NewMetrics creates the proxy collectors and registers them on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		exchanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_exchanges_total",
			Help: "SOAP exchanges by role, upstream and outcome (ok, soap_fault, gateway_error).",
		}, []string{"role", "upstream", "outcome"}),
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
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_edge_retries_total",
			Help: "Exchanges sent again because the tunnel refused them before the origin saw them.",
		}, []string{"peer"}),
		upstreamConns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_origin_upstream_connections_total",
			Help: "Connections the origin opened to upstream servers (reused ones are not counted).",
		}, []string{"upstream"}),
	}
	if reg != nil {
		reg.MustRegister(m.exchanges, m.gatewayErrors, m.duration, m.bytes, m.clientConns, m.retries, m.upstreamConns)
	}
	return m
}
