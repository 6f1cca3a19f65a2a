package tunnel

import (
	"fmt"
	"sync"

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
	// streamWaits counts exchanges that found every connection at the stream limit.
	streamWaits *prometheus.CounterVec

	handshakes        *prometheus.CounterVec
	pendingHandshakes prometheus.Gauge

	codecMessages *prometheus.CounterVec
	codecRaw      *prometheus.CounterVec
	codecPayload  *prometheus.CounterVec
	resyncs       *prometheus.CounterVec
	resends       *prometheus.CounterVec
	fallbacks     *prometheus.CounterVec
	formats       *prometheus.CounterVec
	nackErrors    *prometheus.CounterVec
	retained      *prometheus.GaugeVec
	epoch         *prometheus.GaugeVec
	codecSeconds  *prometheus.HistogramVec

	epochMu sync.Mutex
	epochs  map[string]map[*Session]uint64 // send epoch of every live session, by peer label
}

// Fallback reasons: why a message that could have been coded went identity.
const (
	fbTooLarge = iota
	fbFlushed
	fbWindow
	fbRetentionFull
	fbEncodeError
	fbStreamBusy
	numFallbacks
)

var fallbackNames = [numFallbacks]string{"too_large", "flushed", "window", "retention_full", "encode_error", "stream_busy"}

// Resync reasons: why the receiver rejected a coded message (and sent CODEC_NACK).
const (
	rsDecode = iota
	rsChecksum
	rsStaleEpoch
	numResyncs
)

var resyncNames = [numResyncs]string{"decode", "checksum", "stale_epoch"}

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
			Name: "soapgw_tunnel_dials_total", Help: "Tunnel connection attempts by result: ok, error, extra (an extra connection opened because every connection was at the stream limit; it closes after 30 s idle).",
		}, []string{"peer", "result"}),
		streamWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_tunnel_stream_waits_total",
			Help: "Exchanges that found every tunnel connection to the peer at its stream limit and waited, by how the wait ended: ok (a stream freed or an extra connection came up) or deadline (refused as overloaded).",
		}, []string{"peer", "result"}),
		handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_tunnel_handshakes_total",
			Help: "Tunnel connections accepted by the origin, by how their handshake ended: ok, or the cause of refusal (bad_key, tls_failed, not_tls, timeout, evicted, connection_limit, ...).",
		}, []string{"result"}),
		pendingHandshakes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "soapgw_tunnel_handshakes_pending",
			Help: "Accepted tunnel connections still in their handshake (not yet authenticated).",
		}),

		codecMessages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_tunnel_codec_messages_total",
			Help: "Messages sent and received over the tunnel, by the codec they travelled in (identity included; a resend counts again).",
		}, []string{"peer", "direction", "codec"}),
		codecRaw: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_tunnel_codec_raw_bytes_total",
			Help: "Original (decoded) message bytes sent and received, by codec.",
		}, []string{"peer", "direction", "codec"}),
		codecPayload: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_tunnel_codec_payload_bytes_total",
			Help: "Coded message bytes on the wire (preamble and trailer excluded), by codec; raw/payload is the compression ratio.",
		}, []string{"peer", "direction", "codec"}),
		resyncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_tunnel_codec_resyncs_total",
			Help: "Coded messages this side could not take and asked the peer to resend (CODEC_NACK), by reason.",
		}, []string{"peer", "reason"}),
		resends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_tunnel_codec_resends_total",
			Help: "Coded messages the peer rejected and this side resent as identity.",
		}, []string{"peer"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_tunnel_codec_fallbacks_total",
			Help: "Messages sent as identity although an encoding was configured, by reason.",
		}, []string{"peer", "reason"}),
		formats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_tunnel_codec_format_mismatches_total",
			Help: "Tunnel connections on which a configured codec went unused because the peer speaks another wire format of it (another release, another zstd dictionary).",
		}, []string{"peer", "codec"}),
		nackErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_tunnel_codec_nack_errors_total",
			Help: "CODEC_NACKs for no message awaiting acknowledgement (a peer bug); the stream is reset.",
		}, []string{"peer"}),
		retained: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "soapgw_tunnel_codec_retained_bytes",
			Help: "Bytes of sent coded messages kept until the peer acknowledges them (plus 1 KiB per message for its stream).",
		}, []string{"peer"}),
		epoch: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "soapgw_tunnel_codec_epoch",
			Help: "Highest codec state epoch among the peer's live sessions (1 = never resynchronized since connecting).",
		}, []string{"peer"}),
		codecSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "soapgw_tunnel_codec_seconds",
			Help:    "Time to encode or decode one coded message.",
			Buckets: []float64{.00001, .00005, .0001, .0005, .001, .005, .01, .05, .1},
		}, []string{"peer", "op"}),
		epochs: map[string]map[*Session]uint64{},
	}
	if reg != nil {
		reg.MustRegister(m.sessions, m.streams, m.rtt, m.frames, m.bytes, m.checksum, m.stalls, m.dials, m.streamWaits,
			m.handshakes, m.pendingHandshakes,
			m.codecMessages, m.codecRaw, m.codecPayload, m.resyncs, m.resends, m.fallbacks, m.formats, m.nackErrors,
			m.retained, m.epoch, m.codecSeconds)
	}
	return m
}

var discardMetrics = NewMetrics(nil)

// numFrameSlots counts frames by type: one slot per known type, the last for unknown ones.
const numFrameSlots = int(frame.TypeCodecNack) + 2

// sessionMetrics are one session's collectors with labels resolved once, so the hot path
// pays an atomic add, not a label lookup.
type sessionMetrics struct {
	up, streams       prometheus.Gauge
	rtt               prometheus.Observer
	sent, received    [numFrameSlots]prometheus.Counter // by frame type; the last slot counts unknown types
	bytesOut, bytesIn prometheus.Counter
	checksum, stalls  prometheus.Counter

	parent *Metrics
	peer   string
	// Per codec id (0 = identity), resolved for identity and the local codecs: only those
	// are ever sent or decoded.
	codecSent, codecRecv [frame.MaxCodecID + 1]*codecCounters
	resyncs              [numResyncs]prometheus.Counter
	fallbacks            [numFallbacks]prometheus.Counter
	resends, nackErrors  prometheus.Counter
	retained             prometheus.Gauge
	encodeSec, decodeSec prometheus.Observer
}

type codecCounters struct{ messages, raw, payload prometheus.Counter }

func (c *codecCounters) add(raw, payload int) {
	c.messages.Inc()
	c.raw.Add(float64(raw))
	c.payload.Add(float64(payload))
}

// formatMismatches counts a connection's codecs left unused for a format mismatch.
func (m *Metrics) formatMismatches(peer string, cfg *Config, ids []uint8) {
	if m == nil {
		m = discardMetrics
	}
	for _, id := range ids {
		m.formats.WithLabelValues(peer, cfg.codecName(id)).Inc()
	}
}

func (m *Metrics) session(peer string, cfg *Config) *sessionMetrics {
	if m == nil {
		m = discardMetrics
	}
	sm := &sessionMetrics{
		up:         m.sessions.WithLabelValues(peer),
		streams:    m.streams.WithLabelValues(peer),
		rtt:        m.rtt.WithLabelValues(peer),
		bytesOut:   m.bytes.WithLabelValues(peer, "out"),
		bytesIn:    m.bytes.WithLabelValues(peer, "in"),
		checksum:   m.checksum.WithLabelValues(peer),
		stalls:     m.stalls.WithLabelValues(peer),
		parent:     m,
		peer:       peer,
		resends:    m.resends.WithLabelValues(peer),
		nackErrors: m.nackErrors.WithLabelValues(peer),
		retained:   m.retained.WithLabelValues(peer),
		encodeSec:  m.codecSeconds.WithLabelValues(peer, "encode"),
		decodeSec:  m.codecSeconds.WithLabelValues(peer, "decode"),
	}
	for i := range sm.sent {
		name := "other"
		if i < len(sm.sent)-1 {
			name = frame.Type(i).String()
		}
		sm.sent[i] = m.frames.WithLabelValues(peer, "out", name)
		sm.received[i] = m.frames.WithLabelValues(peer, "in", name)
	}
	for i := range sm.resyncs {
		sm.resyncs[i] = m.resyncs.WithLabelValues(peer, resyncNames[i])
	}
	for i := range sm.fallbacks {
		sm.fallbacks[i] = m.fallbacks.WithLabelValues(peer, fallbackNames[i])
	}
	counters := func(dir, name string) *codecCounters {
		return &codecCounters{
			messages: m.codecMessages.WithLabelValues(peer, dir, name),
			raw:      m.codecRaw.WithLabelValues(peer, dir, name),
			payload:  m.codecPayload.WithLabelValues(peer, dir, name),
		}
	}
	sm.codecSent[0], sm.codecRecv[0] = counters("sent", "identity"), counters("received", "identity")
	for _, mc := range cfg.Codecs {
		id := mc.ID()
		name := cfg.codecName(id)
		sm.codecSent[id], sm.codecRecv[id] = counters("sent", name), counters("received", name)
		m.formats.WithLabelValues(peer, name) // at 0 until a mismatch: the alert has a series
	}
	if sc := cfg.StreamCodec; sc != nil {
		id := sc.ID()
		name := cfg.codecName(id)
		sm.codecSent[id], sm.codecRecv[id] = counters("sent", name), counters("received", name)
	}
	return sm
}

// codecName is the name of codec id in metrics and logs.
func (c *Config) codecName(id uint8) string {
	if c.CodecName != nil {
		if n := c.CodecName(id); n != "" {
			return n
		}
	}
	return fmt.Sprintf("codec-%d", id)
}

func (sm *sessionMetrics) countFrameOf(c *[numFrameSlots]prometheus.Counter, t frame.Type, n int) {
	c[min(int(t), len(c)-1)].Inc()
	sm.bytesOut.Add(float64(n))
}

// setEpoch records session s's send epoch (0: s is gone) and publishes the highest epoch
// among the peer's live sessions, so several connections to one peer do not overwrite
// each other's value.
func (sm *sessionMetrics) setEpoch(s *Session, epoch uint64) {
	m := sm.parent
	m.epochMu.Lock()
	defer m.epochMu.Unlock()
	byS := m.epochs[sm.peer]
	if byS == nil {
		byS = map[*Session]uint64{}
		m.epochs[sm.peer] = byS
	}
	if epoch == 0 {
		delete(byS, s)
	} else {
		byS[s] = epoch
	}
	var top uint64
	for _, e := range byS {
		top = max(top, e)
	}
	if len(byS) == 0 {
		delete(m.epochs, sm.peer)
	}
	m.epoch.WithLabelValues(sm.peer).Set(float64(top))
}

// initPeer creates a peer's stream-wait series at 0, for rate() and alerts.
func (m *Metrics) initPeer(peer string) {
	if m == nil {
		return
	}
	for _, r := range []string{"ok", "deadline"} {
		m.streamWaits.WithLabelValues(peer, r)
	}
}

// streamWait counts an exchange that waited at the stream limit, by result (ok, deadline).
func (m *Metrics) streamWait(peer, result string) {
	if m == nil {
		return
	}
	m.streamWaits.WithLabelValues(peer, result).Inc()
}

// dialExtra counts an extra connection opened at the stream limit: not a reconnection,
// so alerts on ok dials (flapping) do not count it.
func (m *Metrics) dialExtra(peer string) {
	if m == nil {
		return
	}
	m.dials.WithLabelValues(peer, "extra").Inc()
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

// handshakeResults are the results a handshake is counted under; each series exists from
// the start so that rate() and alerts see a 0 before the first refusal.
var handshakeResults = []string{resultOK, resultEvicted, resultHello, resultConnectionLimit, resultError,
	"timeout", "not_tls", "unexpected_tls", "tls_failed", "bad_certificate", "bad_key", "protocol_error", "io_error"}

// InitHandshakes creates the handshake series at 0 (an origin calls it once).
func (m *Metrics) InitHandshakes() {
	if m == nil {
		return
	}
	for _, r := range handshakeResults {
		m.handshakes.WithLabelValues(r)
	}
}

func (m *Metrics) handshake(result string) {
	if m == nil {
		return
	}
	m.handshakes.WithLabelValues(result).Inc()
}

func (m *Metrics) handshakesPending(n int) {
	if m == nil {
		return
	}
	m.pendingHandshakes.Set(float64(n))
}
