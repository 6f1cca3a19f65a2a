package tunnel

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

// Metrics are the tunnel's Prometheus collectors. They are registered on the registry the
// caller passes (never the global one), so tests and several gateways in one process each
// see their own numbers.
type Metrics struct {
	sessions *prometheus.GaugeVec
	streams  *prometheus.GaugeVec
	rtt      *prometheus.HistogramVec
	frames   *prometheus.CounterVec
	bytes    *prometheus.CounterVec
	checksum *prometheus.CounterVec
	stalls   *prometheus.CounterVec
	dials    *prometheus.CounterVec
}

// NewMetrics creates the tunnel collectors and registers them on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		sessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "soapgw_tunnel_sessions", Help: "Tunnel connections currently up, by peer gateway.",
		}, []string{"peer"}),
		streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "soapgw_tunnel_streams", Help: "Exchanges (streams) in flight on tunnel connections, by peer gateway.",
		}, []string{"peer"}),
		rtt: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "soapgw_tunnel_rtt_seconds", Help: "Round-trip time measured by tunnel keepalive pings.",
			Buckets: []float64{.0001, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"peer"}),
		frames: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_tunnel_frames_total", Help: "Tunnel frames sent and received, by frame type.",
		}, []string{"peer", "direction", "type"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_tunnel_wire_bytes_total", Help: "Bytes of tunnel frames (headers included) sent and received.",
		}, []string{"peer", "direction"}),
		checksum: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_tunnel_checksum_errors_total", Help: "Messages rejected because their CRC-32C did not match.",
		}, []string{"peer"}),
		stalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_tunnel_flow_control_stalls_total", Help: "Times a sender waited for stream window credit.",
		}, []string{"peer"}),
		dials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_tunnel_dials_total", Help: "Tunnel connection attempts by result (ok, error).",
		}, []string{"peer", "result"}),
	}
	if reg != nil {
		reg.MustRegister(m.sessions, m.streams, m.rtt, m.frames, m.bytes, m.checksum, m.stalls, m.dials)
	}
	return m
}

var discardMetrics = NewMetrics(nil)

// sessionMetrics are one session's collectors with labels resolved once, so the hot path
// pays an atomic add, not a label lookup.
type sessionMetrics struct {
	up, streams       prometheus.Gauge
	rtt               prometheus.Observer
	sent, received    [7]prometheus.Counter // by frame type; the last slot counts unknown types
	bytesOut, bytesIn prometheus.Counter
	checksum, stalls  prometheus.Counter
}

func (m *Metrics) session(peer string) *sessionMetrics {
	if m == nil {
		m = discardMetrics
	}
	sm := &sessionMetrics{
		up:       m.sessions.WithLabelValues(peer),
		streams:  m.streams.WithLabelValues(peer),
		rtt:      m.rtt.WithLabelValues(peer),
		bytesOut: m.bytes.WithLabelValues(peer, "out"),
		bytesIn:  m.bytes.WithLabelValues(peer, "in"),
		checksum: m.checksum.WithLabelValues(peer),
		stalls:   m.stalls.WithLabelValues(peer),
	}
	for i := range sm.sent {
		name := "other"
		if i < len(sm.sent)-1 {
			name = frame.Type(i).String()
		}
		sm.sent[i] = m.frames.WithLabelValues(peer, "out", name)
		sm.received[i] = m.frames.WithLabelValues(peer, "in", name)
	}
	return sm
}

func (sm *sessionMetrics) countFrame(c *[7]prometheus.Counter, b []byte) {
	c[min(int(b[3]), len(c)-1)].Inc()
	sm.bytesOut.Add(float64(len(b)))
}

func (m *Metrics) dial(peer string, ok bool) {
	if m == nil {
		return
	}
	r := "error"
	if ok {
		r = "ok"
	}
	m.dials.WithLabelValues(peer, r).Inc()
}
