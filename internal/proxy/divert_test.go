package proxy

import (
	"bytes"
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/tunnel"
)

// lossyUDPStream is a tunnel stream that says what a UDP tunnel stream says on a lossy
// path whose edge keeps a TCP tunnel beside (quic.Stream.DivertLarge).
type lossyUDPStream struct{ *tunnel.Stream }

func (lossyUDPStream) DivertLarge() bool { return true }

// divertingOpener counts the streams opened over "the other tunnel" (here: the same
// session, which is what the edge's resume needs).
type divertingOpener struct {
	Opener
	diverted atomic.Int32
}

func (d *divertingOpener) OpenDiverted(ctx context.Context) (Stream, error) {
	d.diverted.Add(1)
	return d.OpenStream(ctx)
}

// TestDivertLargeResponses: over a stream that asks for it (a lossy UDP path, an edge
// with a TCP tunnel beside), a response of a known length of at least divertMinBytes
// goes to the edge over the other tunnel: the exchange's stream carries only the
// "diverted" answer and the edge collects the response with a resume at offset 0. The
// client gets it byte for byte either way; small and chunked responses stay on the
// stream; without a Diverter the edge collects on its own opener.
func TestDivertLargeResponses(t *testing.T) {
	large := bytes.Repeat([]byte("<row>0123456789abcdef</row>"), 4_000) // 108 KB: within the stream window, so coded
	cases := []struct {
		name        string
		body        []byte
		chunked     bool
		diverter    bool
		coded       bool // the tunnel codes (and acknowledges) messages
		wantDiverts int
		wantHeld    int // copies held once the acknowledgements are in
	}{
		{"large", large, false, true, false, 1, 1},
		{"large, coded: the collected copy is forgotten", large, false, true, true, 1, 0},
		{"large without a diverter", large, false, false, false, 1, 1},
		{"small", large[:divertMinBytes-1], false, true, false, 0, 1},
		{"chunked", large, true, true, false, 0, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: " + strconv.Itoa(len(tc.body)) + "\r\n\r\n" + string(tc.body)
			if tc.chunked {
				resp = "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nTransfer-Encoding: chunked\r\n\r\n" +
					strconv.FormatInt(int64(len(tc.body)), 16) + "\r\n" + string(tc.body) + "\r\n0\r\n\r\n"
			}
			up := newUpstream(t, func(int, upstreamReq) ([]byte, bool) { return []byte(resp), false })
			m := NewMetrics(prometheus.NewRegistry())
			var d *divertingOpener
			var tun func(bool, *tunnel.Config)
			if tc.coded {
				tun = copyCodecTunnel
			}
			env := newEnv(t, envConfig{
				Upstreams:    []Upstream{{Name: "up", Address: up.addr(), PoolSize: 1}},
				Metrics:      m,
				Tunnel:       tun,
				OriginStream: func(st *tunnel.Stream) Stream { return lossyUDPStream{st} },
				Opener: func(base Opener) Opener {
					if !tc.diverter {
						return base
					}
					d = &divertingOpener{Opener: base}
					return d
				},
			})
			cl := env.dial()
			cl.send(soapRequest(1, "/svc", "", "<x/>"))
			got, body := cl.read("POST")
			require.Equal(t, 200, got.StatusCode)
			require.True(t, bytes.Equal(tc.body, body), "the client got the response byte for byte")

			require.Equal(t, float64(tc.wantDiverts), testutil.ToFloat64(m.diverted.WithLabelValues("up")))
			require.Equal(t, float64(tc.wantDiverts), testutil.ToFloat64(m.held.resumes.WithLabelValues("edge", "diverted")))
			require.Zero(t, testutil.ToFloat64(m.held.resumes.WithLabelValues("edge", "failed")))
			if d != nil {
				require.Equal(t, int32(tc.wantDiverts), d.diverted.Load(), "collected over the other tunnel")
			}
			require.Len(t, up.requests(), 1, "the server got the request once")
			// The held store's budget counts exactly the copies it holds: what was paid
			// ahead for a diverted response and not written was given back.
			require.Eventually(t, func() bool {
				s := env.origin.held
				s.mu.Lock()
				defer s.mu.Unlock()
				var sum int64
				for _, h := range s.byID {
					h.mu.Lock()
					ok := h.prepaid == 0 && (h.lost || h.accounted == heldOverhead+int64(len(h.buf)))
					sum += h.accounted
					h.mu.Unlock()
					if !ok {
						return false
					}
				}
				return sum == s.bytes && len(s.byID) == tc.wantHeld
			}, testDeadline, time.Millisecond)
			require.Equal(t, float64(tc.wantDiverts), testutil.ToFloat64(m.held.resumes.WithLabelValues("origin", "diverted")))
		})
	}
}

// firstLossy says to divert only on the first stream the origin serves: afterwards the
// calls arrive over "the other tunnel", which (like the TCP tunnel) never diverts.
type firstLossy struct {
	*tunnel.Stream
	first bool
}

func (s firstLossy) DivertLarge() bool { return s.first }

// TestDivertedOperationGoesOverTheOtherTunnel: once an operation's response was diverted,
// the edge sends its next calls over the other tunnel at once (no diverted answer, no
// resume: one round trip less); other operations stay on the exchange's own tunnel, and
// a small response over the other tunnel ends the memory.
func TestDivertedOperationGoesOverTheOtherTunnel(t *testing.T) {
	large := bytes.Repeat([]byte("<row>0123456789abcdef</row>"), 10_000)
	small := []byte("<ok/>")
	var served atomic.Int32
	body := func(r upstreamReq) []byte {
		if r.req.Header.Get("X-Small") != "" {
			return small
		}
		return large
	}
	up := newUpstream(t, func(_ int, r upstreamReq) ([]byte, bool) {
		if r.req.Header.Get("X-Garbage") != "" {
			return []byte("SOAP/9 what\r\n\r\n"), true
		}
		b := body(r)
		return []byte("HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: " + strconv.Itoa(len(b)) + "\r\n\r\n" + string(b)), false
	})
	t.Cleanup(func() {
		for range len(up.got) {
			<-up.got
		}
	})
	m := NewMetrics(prometheus.NewRegistry())
	var d *divertingOpener
	env := newEnv(t, envConfig{
		Upstreams: []Upstream{{Name: "up", Address: up.addr(), PoolSize: 1}},
		Metrics:   m,
		OriginStream: func(st *tunnel.Stream) Stream {
			return firstLossy{st, served.Add(1) == 1}
		},
		Opener: func(base Opener) Opener { d = &divertingOpener{Opener: base}; return d },
	})
	cl := env.dial()
	call := func(op string, smallResp bool) {
		t.Helper()
		extra := ""
		if smallResp {
			extra = "X-Small: 1\r\n"
		}
		cl.send("POST /svc HTTP/1.1\r\nHost: svc.example\r\nContent-Type: text/xml\r\nSOAPAction: \"urn:" + op + "\"\r\n" + extra + "Content-Length: 4\r\n\r\n<x/>")
		got, b := cl.read("POST")
		require.Equal(t, 200, got.StatusCode)
		want := large
		if smallResp {
			want = small
		}
		require.True(t, bytes.Equal(want, b))
	}
	call("GetDocument", false) // diverted, collected over the other tunnel
	require.Equal(t, int32(1), d.diverted.Load())
	require.Equal(t, float64(1), testutil.ToFloat64(m.diverted.WithLabelValues("up")))

	call("GetDocument", false) // sent over the other tunnel at once
	require.Equal(t, int32(2), d.diverted.Load())
	require.Equal(t, float64(1), testutil.ToFloat64(m.held.resumes.WithLabelValues("edge", "diverted")), "no resume")

	// A gateway error over the other tunnel (the server answered garbage) is the
	// client's fault response, and the memory stays.
	cl.send("POST /svc HTTP/1.1\r\nHost: svc.example\r\nContent-Type: text/xml\r\nSOAPAction: \"urn:GetDocument\"\r\nX-Garbage: 1\r\nContent-Length: 4\r\n\r\n<x/>")
	got, _ := cl.read("POST")
	require.Equal(t, 500, got.StatusCode, "a gateway Fault")
	require.Equal(t, int32(3), d.diverted.Load())
	cl = env.dial() // the gateway error closed the connection

	call("Add", false) // another operation: its own tunnel
	require.Equal(t, int32(3), d.diverted.Load())

	call("GetDocument", true) // over the other tunnel, but small: forgotten
	require.Equal(t, int32(4), d.diverted.Load())
	call("GetDocument", false)
	require.Equal(t, int32(4), d.diverted.Load(), "back on its own tunnel")
	require.Equal(t, float64(1), testutil.ToFloat64(m.diverted.WithLabelValues("up")))
}

// TestLargeResponsesMemory: the memory lasts largeResponseMemory after the last
// diversion, per peer and operation, ignores calls without an operation, and is bounded.
func TestLargeResponsesMemory(t *testing.T) {
	now := time.Unix(1000, 0)
	l := largeResponses{now: func() time.Time { return now }}
	l.noteDiverted("p", "")
	require.False(t, l.expected("p", ""))
	l.noteDiverted("p", "Get")
	require.True(t, l.expected("p", "Get"))
	require.False(t, l.expected("q", "Get"))
	require.False(t, l.expected("p", "Put"))
	now = now.Add(largeResponseMemory)
	require.True(t, l.expected("p", "Get"))
	now = now.Add(time.Second)
	require.False(t, l.expected("p", "Get"), "expired")
	l.noteDiverted("p", "Get")
	l.forget("p", "Get")
	require.False(t, l.expected("p", "Get"))
	for i := range maxLargeOps + 10 {
		l.noteDiverted("p", strconv.Itoa(i))
	}
	require.Len(t, l.ops, maxLargeOps)
	now = now.Add(2 * largeResponseMemory)
	l.noteDiverted("p", "new")
	require.True(t, l.expected("p", "new"), "expired entries make room")
	require.Len(t, l.ops, 1)
}
