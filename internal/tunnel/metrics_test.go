package tunnel

import (
	"context"
	"sort"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/peerauth"
)

// metricNames pins the exported names: dashboards and alerts depend on them.
var metricNames = []string{
	"soapgw_tunnel_checksum_errors_total",
	"soapgw_tunnel_codec_epoch",
	"soapgw_tunnel_codec_fallbacks_total",
	"soapgw_tunnel_codec_format_mismatches_total",
	"soapgw_tunnel_codec_messages_total",
	"soapgw_tunnel_codec_nack_errors_total",
	"soapgw_tunnel_codec_payload_bytes_total",
	"soapgw_tunnel_codec_raw_bytes_total",
	"soapgw_tunnel_codec_resends_total",
	"soapgw_tunnel_codec_resyncs_total",
	"soapgw_tunnel_codec_retained_bytes",
	"soapgw_tunnel_codec_seconds",
	"soapgw_tunnel_dials_total",
	"soapgw_tunnel_flow_control_stalls_total",
	"soapgw_tunnel_frames_total",
	"soapgw_tunnel_handshakes_pending",
	"soapgw_tunnel_handshakes_total",
	"soapgw_tunnel_rtt_seconds",
	"soapgw_tunnel_sessions",
	"soapgw_tunnel_streams",
	"soapgw_tunnel_wire_bytes_total",
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	c, s := sessionPairMetrics(t, tcpPair, codecConfig("edge", 0), codecConfig("origin", 0), m, m)
	echoServer(t, s)
	got, _, err := exchangeCoded(context.Background(), c, []byte("<x/>"))
	require.NoError(t, err)
	require.Equal(t, "re:<x/>", string(got))
	m.dial("test", true)
	m.rtt.WithLabelValues("test").Observe(0.001)
	m.InitHandshakes()
	m.handshake(resultOK)
	require.Equal(t, 1.0, testutil.ToFloat64(m.handshakes.WithLabelValues(resultOK)))
	require.Zero(t, testutil.ToFloat64(m.handshakes.WithLabelValues("bad_key")), "every result exists at 0 from the start")

	// Pre-created at 0: rates and alerts work before the first event.
	for _, r := range resyncNames {
		require.Zero(t, testutil.ToFloat64(m.resyncs.WithLabelValues("test", r)))
	}
	for _, r := range fallbackNames {
		require.Zero(t, testutil.ToFloat64(m.fallbacks.WithLabelValues("test", r)))
	}
	require.Zero(t, testutil.ToFloat64(m.formats.WithLabelValues("test", "delta")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.epoch.WithLabelValues("test")))
	require.Equal(t, 1.0, messages(m, "test", "sent", "delta"))
	require.Equal(t, 1.0, messages(m, "edge", "received", "delta"))
	require.Equal(t, 7.0, testutil.ToFloat64(m.codecRaw.WithLabelValues("edge", "sent", "delta")))
	require.Equal(t, 4, testutil.CollectAndCount(m.codecSeconds), "encode and decode for each of the two peer labels")
	require.Positive(t, testutil.ToFloat64(m.frames.WithLabelValues("test", "in", "DATA")))

	mfs, err := reg.Gather()
	require.NoError(t, err)
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	sort.Strings(names)
	require.Equal(t, metricNames, names)

	for _, col := range []prometheus.Collector{m.sessions, m.streams, m.rtt, m.frames, m.bytes, m.checksum, m.stalls, m.dials,
		m.codecMessages, m.codecRaw, m.codecPayload, m.resyncs, m.resends, m.fallbacks, m.nackErrors, m.retained, m.epoch, m.codecSeconds,
		m.handshakes, m.pendingHandshakes} {
		problems, err := testutil.CollectAndLint(col)
		require.NoError(t, err)
		require.Empty(t, problems)
	}
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)

	// The epoch gauge is the highest among the peer's live sessions and drops when they go.
	require.NoError(t, c.Close())
	require.NoError(t, s.Close())
	require.Zero(t, testutil.ToFloat64(m.epoch.WithLabelValues("test")))
	require.Zero(t, testutil.ToFloat64(m.retained.WithLabelValues("test")))
}

func TestEpochGaugeIsMaxOverSessions(t *testing.T) {
	m := NewMetrics(nil)
	a, b := &Session{}, &Session{}
	sm := m.session("p", &Config{})
	sm.setEpoch(a, 1)
	sm.setEpoch(b, 4)
	require.Equal(t, 4.0, testutil.ToFloat64(m.epoch.WithLabelValues("p")))
	sm.setEpoch(a, 2)
	require.Equal(t, 4.0, testutil.ToFloat64(m.epoch.WithLabelValues("p")))
	sm.setEpoch(b, 0)
	require.Equal(t, 2.0, testutil.ToFloat64(m.epoch.WithLabelValues("p")))
	sm.setEpoch(a, 0)
	require.Zero(t, testutil.ToFloat64(m.epoch.WithLabelValues("p")))
}

// TestHandshakeResultsCoverPeerauth: every cause peerauth reports has a pre-created
// series, so alerts on it see a 0 before the first refusal.
func TestHandshakeResultsCoverPeerauth(t *testing.T) {
	for _, r := range []string{peerauth.ResultTimeout, peerauth.ResultNotTLS, peerauth.ResultUnexpectedTLS, peerauth.ResultTLS,
		peerauth.ResultBadCertificate, peerauth.ResultBadKey, peerauth.ResultProtocol, peerauth.ResultIO} {
		require.Contains(t, handshakeResults, r)
	}
}
