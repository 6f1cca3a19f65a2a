package quic

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the UDP tunnel's Prometheus collectors, registered on the caller's registry.
// Path figures (RTT, congestion window, packets, loss) come from quic-go's statistics of
// each live connection at scrape time, plus the totals of connections already closed, so
// the counters never go back when a connection is replaced.
type Metrics struct {
	connections *prometheus.GaugeVec
	streams     *prometheus.GaugeVec
	dials       *prometheus.CounterVec
	handshakes  *prometheus.CounterVec
	messages    *prometheus.CounterVec
	raw         *prometheus.CounterVec
	payload     *prometheus.CounterVec
	laneBusy    *prometheus.CounterVec
	nacks       *prometheus.CounterVec
	ctrlAcks    *prometheus.CounterVec
	waits       *prometheus.CounterVec
	waitSeconds *prometheus.CounterVec
	window      *prometheus.GaugeVec
	copies      *prometheus.CounterVec
	waited      *prometheus.CounterVec
	tailProbes  *prometheus.CounterVec
	haves       *prometheus.CounterVec

	mu     sync.Mutex
	live   map[*conn]*pathSnapshot
	closed map[string]*pathTotals // by peer label
	stats  statsCollector
}

// pathSnapshot is the last remote address seen of a live connection, for path changes.
type pathSnapshot struct {
	addr    string
	changes uint64
}

type pathTotals struct {
	packetsSent, packetsReceived, packetsLost uint64
	bytesSent, bytesReceived, bytesLost       uint64
	pathChanges                               uint64
}

// NewMetrics creates the collectors and registers them on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		connections: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "soapgw_udp_connections", Help: "UDP (QUIC) tunnel connections up and authenticated, by peer gateway.",
		}, []string{"peer"}),
		streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "soapgw_udp_streams", Help: "Exchanges in flight on UDP tunnel connections, by peer gateway.",
		}, []string{"peer"}),
		dials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_udp_dials_total", Help: "UDP tunnel connection attempts by the edge, by peer and result (ok, error).",
		}, []string{"peer", "result"}),
		handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_udp_handshakes_total", Help: "UDP tunnel connections accepted by the origin after QUIC's TLS handshake, by authentication result.",
		}, []string{"result"}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_udp_codec_messages_total", Help: "Messages sent and received over the UDP tunnel, by codec and mode (identity, stateless, sequenced, fresh, streamed).",
		}, []string{"peer", "direction", "codec", "mode"}),
		raw: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_udp_codec_raw_bytes_total", Help: "Original message bytes sent and received over the UDP tunnel, by codec.",
		}, []string{"peer", "direction", "codec"}),
		payload: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_udp_codec_payload_bytes_total", Help: "Coded message bytes (heads excluded) sent and received over the UDP tunnel, by codec.",
		}, []string{"peer", "direction", "codec"}),
		laneBusy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_udp_codec_lane_busy_total", Help: "Messages coded stateless because a sequenced message was still unacknowledged (concurrency costs compression, never waiting).",
		}, []string{"peer"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_udp_codec_nacks_total", Help: "Sequenced messages that could not be decoded (the exchange is retried and the codec state starts fresh), sent and received.",
		}, []string{"peer", "direction"}),
		ctrlAcks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_udp_codec_control_acks_total", Help: "Acknowledgements of sequenced messages sent on the control stream because no message head could carry them.",
		}, []string{"peer"}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_udp_codec_decode_waits_total", Help: "Sequenced messages that arrived before the one they were coded after and waited for it (only with a sequenced window above 1: the head-of-line blocking that window allows).",
		}, []string{"peer"}),
		waitSeconds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_udp_codec_decode_wait_seconds_total", Help: "Time sequenced messages spent waiting for an earlier one.",
		}, []string{"peer"}),
		window: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "soapgw_udp_codec_window", Help: "Sequenced messages a sender may have unacknowledged (1: strict, no message waits for another; auto widens it on a path without loss).",
		}, []string{"peer"}),
		copies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_udp_copies_total", Help: "Redundant DATAGRAM copies of small messages, by result: sent, skipped (the answer was in), too_large, sent_dropped (queue full); received: used (the copy beat its stream), late (the stream came first), early_start (origin: an exchange started from a copy before its stream), refused.",
		}, []string{"peer", "result"}),
		waited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_udp_codec_waited_reports_total", Help: "WAITED notices sent: a sequenced message waited for an earlier one whose first packet came late (a loss), which turns the peer's auto window strict for 30 s.",
		}, []string{"peer"}),
		tailProbes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_udp_tail_probes_total", Help: "PING control frames sent to speed up QUIC's loss recovery, by peer: at the edge for exchanges whose response was late while loss is reported and the request was not copied, at the origin in answer to the edge's PINGs.",
		}, []string{"peer"}),
		haves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_udp_have_frames_total", Help: "HAVE control frames by peer and direction (sent: the edge reports responses it read whole that no ACK covers; received: the origin forgets their held copies).",
		}, []string{"peer", "direction"}),
		live:   map[*conn]*pathSnapshot{},
		closed: map[string]*pathTotals{},
	}
	m.stats.m = m
	if reg != nil {
		reg.MustRegister(m.connections, m.streams, m.dials, m.handshakes, m.messages, m.raw, m.payload,
			m.laneBusy, m.nacks, m.ctrlAcks, m.waits, m.waitSeconds, m.window, m.copies, m.waited, m.tailProbes, m.haves, &m.stats)
	}
	return m
}

// connMetrics are the children of one connection's peer label, resolved once.
type connMetrics struct {
	m        *Metrics
	peer     string
	streams  prometheus.Gauge
	laneBusy prometheus.Counter
	ctrlAcks prometheus.Counter
	nacks    *prometheus.CounterVec

	decodeWaits       prometheus.Counter
	decodeWaitSeconds prometheus.Counter
	copies            *prometheus.CounterVec
	waitedReports     prometheus.Counter
	tailProbes        prometheus.Counter
	haveSent          prometheus.Counter
	haveReceived      prometheus.Counter
	name              func(id uint8) string

	mu    sync.Mutex
	kinds map[messageKind]*messageCounters // resolved children, so a message costs no label hashing
}

type messageKind struct {
	dir         string
	codec, mode uint8
}

type messageCounters struct{ messages, raw, payload prometheus.Counter }

func (m *Metrics) conn(peer string, name func(id uint8) string) *connMetrics {
	if name == nil {
		name = defaultCodecName
	}
	if peer == "" {
		// The origin's placeholder until HELLO names the edge: counted nowhere, so no
		// series with an empty peer label appears.
		m = unregistered
	}
	for _, dir := range []string{"sent", "received"} {
		m.nacks.WithLabelValues(peer, dir) // the series exist at 0, for rate() and alerts
	}
	return &connMetrics{
		m: m, peer: peer, name: name,
		streams:  m.streams.WithLabelValues(peer),
		laneBusy: m.laneBusy.WithLabelValues(peer),
		ctrlAcks: m.ctrlAcks.WithLabelValues(peer),

		decodeWaits:       m.waits.WithLabelValues(peer),
		decodeWaitSeconds: m.waitSeconds.WithLabelValues(peer),
		copies:            m.copies.MustCurryWith(prometheus.Labels{"peer": peer}),
		waitedReports:     m.waited.WithLabelValues(peer),
		tailProbes:        m.tailProbes.WithLabelValues(peer),
		haveSent:          m.haves.WithLabelValues(peer, "sent"),
		haveReceived:      m.haves.WithLabelValues(peer, "received"),
		nacks:             m.nacks.MustCurryWith(prometheus.Labels{"peer": peer}),
	}
}

// unregistered takes the counts of connections not yet named.
var unregistered = NewMetrics(nil)

var modeNames = [...]string{modeStateless: "stateless", modeSequenced: "sequenced", modeFresh: "fresh", modeStreamed: "streamed"}

// defaultCodecName names codec ids in labels when the session config has no CodecName.
func defaultCodecName(id uint8) string {
	if id == 0 {
		return "identity"
	}
	return "codec-" + strconv.Itoa(int(id))
}

func (cm *connMetrics) message(dir string, codec, mode uint8, raw, payload int) {
	k := messageKind{dir, codec, mode}
	cm.mu.Lock()
	c := cm.kinds[k]
	if c == nil {
		m, name := "identity", cm.name(codec)
		if codec != 0 {
			m = modeNames[mode]
		}
		c = &messageCounters{
			messages: cm.m.messages.WithLabelValues(cm.peer, dir, name, m),
			raw:      cm.m.raw.WithLabelValues(cm.peer, dir, name),
			payload:  cm.m.payload.WithLabelValues(cm.peer, dir, name),
		}
		if cm.kinds == nil {
			cm.kinds = map[messageKind]*messageCounters{}
		}
		cm.kinds[k] = c
	}
	cm.mu.Unlock()
	c.messages.Inc()
	c.raw.Add(float64(raw))
	c.payload.Add(float64(payload))
}

// track adds a live connection to the path statistics.
func (m *Metrics) track(c *conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.live[c] = &pathSnapshot{addr: c.qc.RemoteAddr().String()}
	m.connections.WithLabelValues(c.label).Inc()
}

// untrack folds a closed connection's statistics into its peer's totals.
func (m *Metrics) untrack(c *conn) {
	s := c.qc.ConnectionStats()
	m.mu.Lock()
	defer m.mu.Unlock()
	snap, ok := m.live[c]
	if !ok {
		return
	}
	delete(m.live, c)
	m.connections.WithLabelValues(c.label).Dec()
	t := m.closed[c.label]
	if t == nil {
		t = &pathTotals{}
		m.closed[c.label] = t
	}
	t.packetsSent += s.PacketsSent
	t.packetsReceived += s.PacketsReceived
	t.packetsLost += s.PacketsLost
	t.bytesSent += s.BytesSent
	t.bytesReceived += s.BytesReceived
	t.bytesLost += s.BytesLost
	t.pathChanges += snap.changes
}

// statsCollector exports quic-go's per-connection statistics.
type statsCollector struct{ m *Metrics }

var (
	descRTT      = prometheus.NewDesc("soapgw_udp_rtt_seconds", "Smoothed round-trip time of the UDP tunnel's path (RFC 9002), by peer; the lowest over its connections.", []string{"peer"}, nil)
	descMinRTT   = prometheus.NewDesc("soapgw_udp_min_rtt_seconds", "Minimum round-trip time seen on the UDP tunnel's path, by peer.", []string{"peer"}, nil)
	descCwnd     = prometheus.NewDesc("soapgw_udp_congestion_window_bytes", "Congestion window of the UDP tunnel's sender, by peer (summed over connections).", []string{"peer"}, nil)
	descPackets  = prometheus.NewDesc("soapgw_udp_packets_total", "QUIC packets of the UDP tunnel, by peer and kind (sent, received, lost). lost counts what QUIC's loss detection declared lost; it misses a lone packet resent after a probe timeout, the common loss of one-packet SOAP messages (see soapgw_udp_codec_decode_waits_total and RTT).", []string{"peer", "kind"}, nil)
	descBytes    = prometheus.NewDesc("soapgw_udp_bytes_total", "QUIC bytes of the UDP tunnel (UDP/IP headers excluded), by peer and kind (sent, received, lost).", []string{"peer", "kind"}, nil)
	descLoss     = prometheus.NewDesc("soapgw_udp_loss_ratio", "Share of this gateway's packets to a peer that the peer reports it never received (RECEIVED reports, weighted over the last ~20 s; 0 until ~300 packets were sent), by peer; the highest over its connections. Unlike soapgw_udp_packets_total{kind=\"lost\"} it counts lone packets resent after a probe timeout.", []string{"peer"}, nil)
	descCopying  = prometheus.NewDesc("soapgw_udp_copying", "UDP tunnel connections to a peer that send small messages twice now (redundancy on, or auto while the loss ratio is high).", []string{"peer"}, nil)
	descMigrated = prometheus.NewDesc("soapgw_udp_path_changes_total", "Times the peer's address changed under a live UDP tunnel connection (NAT rebinding, network change), seen at scrape time.", []string{"peer"}, nil)
)

func (s *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRTT, descMinRTT, descCwnd, descPackets, descBytes, descMigrated, descLoss, descCopying} {
		ch <- d
	}
}

func (s *statsCollector) Collect(ch chan<- prometheus.Metric) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	sums := map[string]*pathTotals{}
	rtt, minRTT, cwnd := map[string]float64{}, map[string]float64{}, map[string]float64{}
	loss, copying := map[string]float64{}, map[string]float64{}
	for peer, t := range m.closed {
		c := *t
		sums[peer] = &c
	}
	for c, snap := range m.live {
		st := c.qc.ConnectionStats()
		if a := c.qc.RemoteAddr().String(); a != snap.addr {
			snap.addr = a
			snap.changes++
		}
		t := sums[c.label]
		if t == nil {
			t = &pathTotals{}
			sums[c.label] = t
		}
		t.packetsSent += st.PacketsSent
		t.packetsReceived += st.PacketsReceived
		t.packetsLost += st.PacketsLost
		t.bytesSent += st.BytesSent
		t.bytesReceived += st.BytesReceived
		t.bytesLost += st.BytesLost
		t.pathChanges += snap.changes
		if r := st.SmoothedRTT.Seconds(); r > 0 && (rtt[c.label] == 0 || r < rtt[c.label]) {
			rtt[c.label] = r
		}
		if r := st.MinRTT.Seconds(); r > 0 && (minRTT[c.label] == 0 || r < minRTT[c.label]) {
			minRTT[c.label] = r
		}
		cwnd[c.label] += float64(st.CongestionWindow)
		loss[c.label] = max(loss[c.label], c.loss.lossRatio())
		if c.copyNow(false) {
			copying[c.label]++
		}
	}
	for peer, t := range sums {
		for kind, v := range map[string]uint64{"sent": t.packetsSent, "received": t.packetsReceived, "lost": t.packetsLost} {
			ch <- prometheus.MustNewConstMetric(descPackets, prometheus.CounterValue, float64(v), peer, kind)
		}
		for kind, v := range map[string]uint64{"sent": t.bytesSent, "received": t.bytesReceived, "lost": t.bytesLost} {
			ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(v), peer, kind)
		}
		ch <- prometheus.MustNewConstMetric(descMigrated, prometheus.CounterValue, float64(t.pathChanges), peer)
	}
	for peer, v := range rtt {
		ch <- prometheus.MustNewConstMetric(descRTT, prometheus.GaugeValue, v, peer)
	}
	for peer, v := range minRTT {
		ch <- prometheus.MustNewConstMetric(descMinRTT, prometheus.GaugeValue, v, peer)
	}
	for peer, v := range cwnd {
		ch <- prometheus.MustNewConstMetric(descCwnd, prometheus.GaugeValue, v, peer)
		ch <- prometheus.MustNewConstMetric(descLoss, prometheus.GaugeValue, loss[peer], peer)
		ch <- prometheus.MustNewConstMetric(descCopying, prometheus.GaugeValue, copying[peer], peer)
	}
}
