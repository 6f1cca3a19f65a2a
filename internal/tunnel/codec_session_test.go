package tunnel

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

// exchangeCoded is exchange with an optional per-stream encoding override; it also returns
// the codec the response arrived in.
func exchangeCoded(ctx context.Context, s *Session, msg []byte, override ...Encoding) ([]byte, uint8, error) {
	st, err := s.OpenStream(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer st.Close()
	if len(override) > 0 {
		st.SetEncoding(override[0])
	}
	if _, err := st.Write(msg); err != nil {
		return nil, 0, err
	}
	if err := st.CloseWrite(); err != nil {
		return nil, 0, err
	}
	got, err := io.ReadAll(st)
	st.mu.Lock()
	codec := st.codec
	st.mu.Unlock()
	return got, codec, err
}

func testMsg(n int, seed int) []byte {
	msg := make([]byte, n)
	for i := range msg {
		msg[i] = byte(i*7 + seed)
	}
	return msg
}

// messages counts soapgw_tunnel_codec_messages_total.
func messages(m *Metrics, peer, dir, codec string) float64 {
	return testutil.ToFloat64(m.codecMessages.WithLabelValues(peer, dir, codec))
}

func resyncs(m *Metrics, peer string) (total float64) {
	for _, r := range resyncNames {
		total += testutil.ToFloat64(m.resyncs.WithLabelValues(peer, r))
	}
	return total
}

func fallbacks(m *Metrics, peer, reason string) float64 {
	return testutil.ToFloat64(m.fallbacks.WithLabelValues(peer, reason))
}

func waitNoStreams(t *testing.T, ss ...*Session) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		left := 0
		for _, s := range ss {
			left += s.NumStreams()
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, s := range ss {
				t.Log(dumpStreams(s))
			}
			t.Fatalf("%d streams left behind", left)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// dumpStreams describes a session's streams, for a test that finds some left behind.
func dumpStreams(s *Session) string {
	s.mu.Lock()
	sts := make([]*Stream, 0, len(s.streams))
	for _, st := range s.streams {
		sts = append(sts, st)
	}
	out := fmt.Sprintf("%s: %d streams, numOpen=%d lingering=%d unacked=%d retained=%d acksPending=%d ring=%d",
		s, len(s.streams), s.numOpen, s.lingering, len(s.sent)-s.sentHead, s.retained, s.acksPending, len(s.ring)-s.ringHead)
	s.mu.Unlock()
	for _, st := range sts {
		st.mu.Lock()
		out += fmt.Sprintf("\n  id=%d rstarted=%v rdone=%v sstarted=%v sdone=%v codedOut=%v resending=%v finishWanted=%v lingering=%v rerr=%v werr=%v chunks=%d",
			st.id, st.rstarted, st.rdone, st.sstarted, st.sdone, st.codedOut, st.resending, st.finishWanted, st.lingering, st.rerr, st.werr, len(st.chunks))
		st.mu.Unlock()
	}
	return out
}

// Coded messages round-trip byte for byte; those above the limit stream as identity.
func TestCodedRoundTrip(t *testing.T) {
	const limit = 64 << 10
	testConnTypes(t, func(t *testing.T, pair connPair) {
		cm, sm := NewMetrics(nil), NewMetrics(nil)
		c, s := sessionPairMetrics(t, pair, codecConfig("edge", limit), codecConfig("origin", limit), cm, sm)
		echoServer(t, s)
		sizes := []int{0, 1, 1000, limit - 4, limit - 3, limit, limit + 1, 300 << 10}
		if strings.HasSuffix(t.Name(), "/tcp") {
			sizes = append(sizes, 20<<20)
		}
		var codedReq, codedResp float64
		for i, n := range sizes {
			msg := testMsg(n, i)
			got, codec, err := exchangeCoded(context.Background(), c, msg)
			require.NoError(t, err, "size %d", n)
			require.True(t, bytes.Equal(append([]byte("re:"), msg...), got), "size %d: response differs", n)
			if n <= limit {
				codedReq++
			}
			want := uint8(0)
			if n+3 <= limit {
				codedResp++
				want = deltaID
			}
			require.Equal(t, want, codec, "size %d: response codec", n)
		}
		require.Equal(t, codedReq, messages(cm, "test", "sent", "delta"))
		require.Equal(t, codedReq, messages(sm, "edge", "received", "delta"))
		require.Equal(t, codedResp, messages(sm, "edge", "sent", "delta"))
		require.Equal(t, codedResp, messages(cm, "test", "received", "delta"))
		require.Equal(t, float64(len(sizes))-codedReq, messages(cm, "test", "sent", "identity"))
		require.Equal(t, float64(len(sizes))-codedReq, fallbacks(cm, "test", "too_large"))
		require.Zero(t, resyncs(cm, "test")+resyncs(sm, "edge"))
		require.Positive(t, testutil.ToFloat64(cm.codecPayload.WithLabelValues("test", "sent", "delta")))
		waitNoStreams(t, c, s)
		for _, x := range []*Session{c, s} {
			b, n := x.retainedForTest()
			require.Zero(t, b)
			require.Zero(t, n)
		}
	})
}

// 64 concurrent streams mix coded and identity messages. The stateful codec fails on any
// message decoded out of encode order, so no resync may happen.
func TestCodedConcurrentStreamsKeepOrder(t *testing.T) {
	testConnTypes(t, func(t *testing.T, pair connPair) {
		cm, sm := NewMetrics(nil), NewMetrics(nil)
		c, s := sessionPairMetrics(t, pair, codecConfig("edge", 0), codecConfig("origin", 0), cm, sm)
		echoServer(t, s)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for i := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				msg := bytes.Repeat([]byte(fmt.Sprintf("<m id=%d/>", i)), 1+rand.IntN(2000))
				var override []Encoding
				switch i % 3 {
				case 1:
					override = []Encoding{nil} // identity
				case 2:
					override = []Encoding{Prefer(0, reverseID)} // stateless codec
				}
				got, _, err := exchangeCoded(context.Background(), c, msg, override...)
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got[3:], msg) {
					errs <- fmt.Errorf("stream %d: mixed-up or corrupted response", i)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Zero(t, resyncs(cm, "test")+resyncs(sm, "edge"), "a coded message was decoded out of order")
		require.Equal(t, 22.0, messages(cm, "test", "sent", "delta"))
		require.Equal(t, 21.0, messages(cm, "test", "sent", "reverse"))
		require.Equal(t, 21.0, messages(cm, "test", "sent", "identity"))
		require.Equal(t, 64.0, messages(sm, "edge", "sent", "delta"), "the echo server codes every response")
		waitNoStreams(t, c, s)
	})
}

func TestCodedIdentityCases(t *testing.T) {
	t.Run("flush", func(t *testing.T) {
		cm := NewMetrics(nil)
		c, s := sessionPairMetrics(t, tcpPair, codecConfig("edge", 0), codecConfig("origin", 0), cm, nil)
		done := make(chan []byte, 1)
		go func() {
			st, err := s.AcceptStream(context.Background())
			if err != nil {
				return
			}
			defer st.Close()
			b, _ := io.ReadAll(st)
			st.mu.Lock()
			codec := st.codec
			st.mu.Unlock()
			_ = st.CloseWrite()
			done <- append(b, codec)
		}()
		st, err := c.OpenStream(context.Background())
		require.NoError(t, err)
		_, err = st.Write([]byte("<head/>"))
		require.NoError(t, err)
		require.NoError(t, st.Flush())
		_, err = st.Write([]byte("<body/>"))
		require.NoError(t, err)
		require.NoError(t, st.CloseWrite())
		got := <-done
		require.Equal(t, "<head/><body/>", string(got[:len(got)-1]))
		require.Equal(t, uint8(0), got[len(got)-1], "a flushed message travels as identity")
		require.Equal(t, 1.0, fallbacks(cm, "test", "flushed"))
		_, _ = io.ReadAll(st)
		st.Close()
	})
	t.Run("peer lacks the codec", func(t *testing.T) {
		cm := NewMetrics(nil)
		scfg := &Config{Node: "origin", Codecs: []MessageCodec{reverseCodec{}}, Encoding: Prefer(0, reverseID)}
		c, s := sessionPairMetrics(t, tcpPair, codecConfig("edge", 0), scfg, cm, nil)
		echoServer(t, s)
		got, codec, err := exchangeCoded(context.Background(), c, []byte("<x/>"))
		require.NoError(t, err)
		require.Equal(t, "re:<x/>", string(got))
		require.Equal(t, reverseID, codec, "the origin codes with the codec both have")
		require.Equal(t, 1.0, messages(cm, "test", "sent", "identity"), "the origin cannot decode delta")
		require.Zero(t, messages(cm, "test", "sent", "delta"))
		require.Zero(t, fallbacks(cm, "test", "too_large")+fallbacks(cm, "test", "flushed"))
	})
	t.Run("peer without codecs", func(t *testing.T) {
		c, s := sessionPair(t, tcpPair, codecConfig("edge", 0), nil)
		echoServer(t, s)
		require.Zero(t, c.Peer().MaxCoded)
		require.Zero(t, c.codedLimit)
		got, codec, err := exchangeCoded(context.Background(), c, []byte("<x/>"))
		require.NoError(t, err)
		require.Equal(t, "re:<x/>", string(got))
		require.Zero(t, codec)
	})
	t.Run("SetEncoding overrides", func(t *testing.T) {
		cm := NewMetrics(nil)
		ccfg := codecConfig("edge", 0)
		ccfg.Encoding = nil
		scfg := codecConfig("origin", 0)
		scfg.Encoding = nil
		c, s := sessionPairMetrics(t, tcpPair, ccfg, scfg, cm, nil)
		echoServer(t, s)
		_, _, err := exchangeCoded(context.Background(), c, []byte("<a/>"))
		require.NoError(t, err)
		_, _, err = exchangeCoded(context.Background(), c, []byte("<b/>"), preferDelta)
		require.NoError(t, err)
		_, _, err = exchangeCoded(context.Background(), c, []byte("<c/>"), Prefer(0, reverseID))
		require.NoError(t, err)
		require.Equal(t, 1.0, messages(cm, "test", "sent", "identity"))
		require.Equal(t, 1.0, messages(cm, "test", "sent", "delta"))
		require.Equal(t, 1.0, messages(cm, "test", "sent", "reverse"))

		// The other way round: the config codes, the stream opts out; too late is ignored.
		c2, s2 := sessionPairMetrics(t, tcpPair, codecConfig("edge", 0), codecConfig("origin", 0), NewMetrics(nil), nil)
		echoServer(t, s2)
		st, err := c2.OpenStream(context.Background())
		require.NoError(t, err)
		st.SetEncoding(nil)
		_, err = st.Write([]byte("<d/>"))
		require.NoError(t, err)
		st.SetEncoding(preferDelta) // after the first Write: ignored
		require.NoError(t, st.CloseWrite())
		got, err := io.ReadAll(st)
		require.NoError(t, err)
		require.Equal(t, "re:<d/>", string(got))
		st.Close()
		b, n := c2.retainedForTest()
		require.Zero(t, b+n, "nothing was coded")
	})
	t.Run("Choose returns an id nobody has", func(t *testing.T) {
		ccfg := codecConfig("edge", 0)
		ccfg.Encoding = EncodingFunc(func([]byte, func(uint8) bool) uint8 { return 99 })
		c, s := sessionPair(t, tcpPair, ccfg, codecConfig("origin", 0))
		echoServer(t, s)
		got, _, err := exchangeCoded(context.Background(), c, []byte("<x/>"))
		require.NoError(t, err)
		require.Equal(t, "re:<x/>", string(got))
	})
}

// A decoder that fails (or whose state goes wrong) is caught: the message is rejected,
// resent as identity and arrives intact; both ends move to epoch 2; coding resumes.
func TestCodedDesyncRecovery(t *testing.T) {
	tests := []struct {
		name   string
		fault  fault
		reason string
		bad    int // the message the receiver rejects
	}{
		{"decode error", faultDecodeError, "decode", 3},
		{"corrupt output", faultCorruptOutput, "checksum", 3},
		{"corrupt state", faultCorruptState, "checksum", 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			testConnTypes(t, func(t *testing.T, pair connPair) {
				fc := &faultCodec{onDecode: map[int]fault{3: tt.fault}}
				scfg := codecConfig("origin", 0)
				scfg.Codecs = []MessageCodec{fc}
				cm, sm := NewMetrics(nil), NewMetrics(nil)
				c, s := sessionPairMetrics(t, pair, codecConfig("edge", 0), scfg, cm, sm)
				echoServer(t, s)
				const total = 10
				for i := 1; i <= total; i++ {
					msg := testMsg(100+i*37, i)
					got, codec, err := exchangeCoded(context.Background(), c, msg)
					require.NoError(t, err, "message %d", i)
					require.True(t, bytes.Equal(append([]byte("re:"), msg...), got), "message %d corrupted", i)
					require.Equal(t, deltaID, codec)
				}
				send, _ := c.codecEpochs()
				_, recv := s.codecEpochs()
				require.Equal(t, uint64(2), send, "the sender moved to a new epoch")
				require.Equal(t, uint64(2), recv, "the receiver followed")
				require.Equal(t, int64(2), fc.newDecs.Load(), "one fresh decoder per epoch")
				require.Equal(t, 1.0, testutil.ToFloat64(sm.resyncs.WithLabelValues("edge", tt.reason)))
				require.Equal(t, 1.0, resyncs(sm, "edge"))
				require.Equal(t, 1.0, testutil.ToFloat64(cm.resends.WithLabelValues("test")))
				require.Equal(t, float64(total), messages(cm, "test", "sent", "delta"))
				require.Equal(t, 1.0, messages(cm, "test", "sent", "identity"), "the resend")
				require.Equal(t, float64(total-1), messages(sm, "edge", "received", "delta"))
				require.Equal(t, 1.0, messages(sm, "edge", "received", "identity"))
				require.Equal(t, 2.0, testutil.ToFloat64(cm.epoch.WithLabelValues("test")))
				waitNoStreams(t, c, s)
				b, n := c.retainedForTest()
				require.Zero(t, b+n)
			})
		})
	}
}

// Messages in flight behind a failed one (pipelined on several streams) are in the broken
// epoch: each is rejected and resent; none is lost or corrupted.
func TestCodedDesyncPipelined(t *testing.T) {
	for _, f := range []fault{faultDecodeError, faultCorruptState} {
		t.Run(fmt.Sprint(f), func(t *testing.T) {
			fc := &faultCodec{onDecode: map[int]fault{5: f}}
			scfg := codecConfig("origin", 0)
			scfg.Codecs = []MessageCodec{fc}
			cm, sm := NewMetrics(nil), NewMetrics(nil)
			c, s := sessionPairMetrics(t, tcpPair, codecConfig("edge", 0), scfg, cm, sm)
			echoServer(t, s)
			const n = 48
			start := make(chan struct{})
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					msg := bytes.Repeat([]byte(fmt.Sprintf("<m id=%d/>", i)), 1+i*13)
					<-start
					got, _, err := exchangeCoded(context.Background(), c, msg)
					if err == nil && !bytes.Equal(got, append([]byte("re:"), msg...)) {
						err = fmt.Errorf("stream %d: response corrupted", i)
					}
					errs <- err
				}()
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			rs := resyncs(sm, "edge")
			require.GreaterOrEqual(t, rs, 1.0)
			require.Equal(t, rs, testutil.ToFloat64(cm.resends.WithLabelValues("test")), "every rejected message was resent")
			require.Equal(t, float64(n), messages(sm, "edge", "received", "delta")+messages(sm, "edge", "received", "identity"))
			t.Logf("%v rejected and resent", rs)
			// Coding goes on in the new epoch.
			got, _, err := exchangeCoded(context.Background(), c, []byte("<after/>"))
			require.NoError(t, err)
			require.Equal(t, "re:<after/>", string(got))
			send, _ := c.codecEpochs()
			_, recv := s.codecEpochs()
			require.Equal(t, send, recv)
			require.GreaterOrEqual(t, send, uint64(2))
			waitNoStreams(t, c, s)
		})
	}
}

// A coded payload that does not fit the stream's window goes identity, and so does a
// message the encoder fails on; both start a new epoch since the encoder may hold the
// message, and later messages code again in step.
func TestCodedSenderFallbacks(t *testing.T) {
	t.Run("window", func(t *testing.T) {
		const window = 64 << 10
		cm, sm := NewMetrics(nil), NewMetrics(nil)
		scfg := codecConfig("origin", 256<<10)
		scfg.StreamWindow = window
		c, s := sessionPairMetrics(t, tcpPair, codecConfig("edge", 256<<10), scfg, cm, sm)
		echoServer(t, s)
		for i, n := range []int{1000, 100 << 10, 2000, window - 100} {
			msg := testMsg(n, i)
			got, _, err := exchangeCoded(context.Background(), c, msg)
			require.NoError(t, err, "size %d", n)
			require.True(t, bytes.Equal(append([]byte("re:"), msg...), got), "size %d", n)
		}
		require.Equal(t, 1.0, fallbacks(cm, "test", "window"))
		require.Equal(t, 3.0, messages(cm, "test", "sent", "delta"))
		require.Equal(t, 1.0, messages(cm, "test", "sent", "identity"))
		require.Zero(t, resyncs(sm, "edge"))
		send, _ := c.codecEpochs()
		_, recv := s.codecEpochs()
		require.Equal(t, uint64(2), send)
		require.Equal(t, uint64(2), recv)
		waitNoStreams(t, c, s)
	})
	t.Run("encode error", func(t *testing.T) {
		fc := &faultCodec{onEncode: map[int]fault{2: faultEncodeError}}
		ccfg := codecConfig("edge", 0)
		ccfg.Codecs = []MessageCodec{fc}
		cm, sm := NewMetrics(nil), NewMetrics(nil)
		c, s := sessionPairMetrics(t, tcpPair, ccfg, codecConfig("origin", 0), cm, sm)
		echoServer(t, s)
		for i := range 5 {
			msg := testMsg(500+i, i)
			got, _, err := exchangeCoded(context.Background(), c, msg)
			require.NoError(t, err)
			require.True(t, bytes.Equal(append([]byte("re:"), msg...), got))
		}
		require.Equal(t, 1.0, fallbacks(cm, "test", "encode_error"))
		require.Equal(t, 4.0, messages(sm, "edge", "received", "delta"))
		require.Zero(t, resyncs(sm, "edge"), "the new epoch keeps the peer in step")
		send, _ := c.codecEpochs()
		require.Equal(t, uint64(2), send)
		waitNoStreams(t, c, s)
	})
}

// A stream reset while its coded message waits in the ring is never encoded, so both
// ends stay in step; the next coded message decodes fine.
func TestCodedResetWhileQueued(t *testing.T) {
	cc, sc := tcpPair(t)
	gate := newGateConn(cc)
	cm, sm := NewMetrics(nil), NewMetrics(nil)
	c, s := sessionsOn(t, gate, sc, codecConfig("edge", 0), codecConfig("origin", 0), cm, sm)
	echoServer(t, s)
	got, _, err := exchangeCoded(context.Background(), c, []byte("<warm-up/>"))
	require.NoError(t, err)
	require.Equal(t, "re:<warm-up/>", string(got))

	// Hold the connection's writer inside a write, so that what follows stays queued. The
	// Flush writes its frame itself (it finds the writer free) and blocks in the gate,
	// holding the writer's token: later operations leave their frames to sendLoop, which
	// waits for the token.
	gate.pause()
	a, err := c.OpenStream(context.Background())
	require.NoError(t, err)
	a.SetEncoding(nil)
	_, err = a.Write([]byte("<a/>"))
	require.NoError(t, err)
	flushed := make(chan error, 1)
	go func() { flushed <- a.Flush() }()
	require.Eventually(t, func() bool { return gate.blocked.Load() > 0 }, time.Second, time.Millisecond)

	b, err := c.OpenStream(context.Background())
	require.NoError(t, err)
	_, err = b.Write([]byte("<b>never encoded</b>"))
	require.NoError(t, err)
	require.NoError(t, b.CloseWrite())
	bytesRetained, _ := c.retainedForTest()
	require.Positive(t, bytesRetained)
	b.Reset(frame.CodeCancel, "changed my mind")
	bytesRetained, _ = c.retainedForTest()
	require.Zero(t, bytesRetained, "the reset message releases its reservation")

	res := make(chan error, 1)
	go func() {
		got, codec, err := exchangeCoded(context.Background(), c, []byte("<c/>"))
		if err == nil && (string(got) != "re:<c/>" || codec != deltaID) {
			err = fmt.Errorf("got %q in codec %d", got, codec)
		}
		res <- err
	}()
	// c's message is queued behind the gate once it holds its retention reservation.
	require.Eventually(t, func() bool { b, _ := c.retainedForTest(); return b > 0 }, 5*time.Second, time.Millisecond)
	gate.resume()
	require.NoError(t, <-flushed)
	require.NoError(t, <-res)
	require.NoError(t, a.CloseWrite())
	_, err = io.ReadAll(a)
	require.NoError(t, err)
	a.Close()
	require.Zero(t, resyncs(sm, "edge"))
	require.Equal(t, 2.0, messages(cm, "test", "sent", "delta"), "warm-up and c; b was never encoded")
	waitNoStreams(t, c, s)
}

// Streams reset or closed at random moments, coded messages among them, leave both ends
// in step and no stream behind.
func TestCodedResetStress(t *testing.T) {
	cm, sm := NewMetrics(nil), NewMetrics(nil)
	c, s := sessionPairMetrics(t, tcpPair, codecConfig("edge", 0), codecConfig("origin", 0), cm, sm)
	echoServer(t, s)
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := c.OpenStream(context.Background())
			if err != nil {
				return
			}
			defer st.Close()
			_, _ = st.Write(testMsg(1+rand.IntN(4000), i))
			switch i % 4 {
			case 0:
				st.Reset(frame.CodeCancel, "before CloseWrite")
				return
			case 1:
				_ = st.CloseWrite()
				st.Reset(frame.CodeCancel, "right after CloseWrite")
				return
			case 2:
				_ = st.CloseWrite()
				time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
				st.Reset(frame.CodeCancel, "a little later")
				return
			}
			_ = st.CloseWrite()
			_, _ = io.ReadAll(st)
		}()
	}
	wg.Wait()
	for i := range 20 {
		msg := testMsg(100+i, i)
		got, codec, err := exchangeCoded(context.Background(), c, msg)
		require.NoError(t, err)
		require.Equal(t, append([]byte("re:"), msg...), got)
		require.Equal(t, deltaID, codec)
	}
	require.Zero(t, resyncs(sm, "edge")+resyncs(cm, "test"), "a reset desynchronized the codec state")
	waitNoStreams(t, c, s)
	for _, x := range []*Session{c, s} {
		b, n := x.retainedForTest()
		require.Zero(t, b)
		require.Zero(t, n)
		x.mu.Lock()
		require.Zero(t, x.lingering)
		x.mu.Unlock()
	}
}

// Stream limits do not count a stream kept only for its unacknowledged coded message.
func TestCodedLingeringStreamsDoNotCountAgainstLimits(t *testing.T) {
	scfg := codecConfig("origin", 0)
	scfg.MaxStreams = 1
	c, s := sessionPair(t, tcpPair, codecConfig("edge", 0), scfg)
	echoServer(t, s)
	for i := range 20 {
		got, _, err := exchangeCoded(context.Background(), c, []byte("<x/>"))
		require.NoError(t, err, "exchange %d", i)
		require.Equal(t, "re:<x/>", string(got))
		// The origin's stream is done but waits ~ackDelay for the edge's ack of its
		// response: the next exchange must not be refused meanwhile. Both ends learn
		// that the exchange is over from frames still crossing the connection (on a
		// busy machine, after exchangeCoded returns): wait for both, not a fixed time.
		active := func(x *Session) int {
			x.mu.Lock()
			defer x.mu.Unlock()
			return len(x.streams) - x.lingering + x.numOpen
		}
		require.Eventually(t, func() bool { return active(s) == 0 && active(c) == 0 }, 5*time.Second, time.Millisecond)
		require.Equal(t, 1, s.NumStreams(), "still lingering")
	}
	waitNoStreams(t, c, s)
}

// CloseGracefully waits until the peer acknowledged every coded message: a rejected one
// could not be resent on a closed connection.
func TestCodedCloseGracefullyWaitsForAcks(t *testing.T) {
	fc := &faultCodec{onDecode: map[int]fault{1: faultDecodeError}}
	ccfg := codecConfig("edge", 0)
	ccfg.Codecs = []MessageCodec{fc}
	c, s := sessionPair(t, tcpPair, ccfg, codecConfig("origin", 0))
	msg := testMsg(5000, 1)
	go func() {
		st, err := s.AcceptStream(context.Background())
		if err != nil {
			return
		}
		_, _ = io.ReadAll(st)
		_, _ = st.Write(msg)
		_ = st.CloseWrite()
		st.Close()
		_ = s.CloseGracefully(context.Background())
	}()
	st, err := c.OpenStream(context.Background())
	require.NoError(t, err)
	st.SetEncoding(nil)
	require.NoError(t, st.CloseWrite())
	got, err := io.ReadAll(st)
	require.NoError(t, err, "the rejected response is resent before the origin closes")
	require.Equal(t, msg, got)
	st.mu.Lock()
	require.Zero(t, st.codec, "it arrived in the resend")
	st.mu.Unlock()
}

func TestConfigValidateCodecs(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"ok", Config{Codecs: []MessageCodec{deltaCodec{}, reverseCodec{}}}, ""},
		{"nil codec", Config{Codecs: []MessageCodec{nil}}, "Codecs[0] is nil"},
		{"id 0", Config{Codecs: []MessageCodec{zeroCodec{}}}, "Codecs[0] has id 0"},
		{"id 128", Config{Codecs: []MessageCodec{bigCodec{}}}, "id 128"},
		{"duplicate", Config{Codecs: []MessageCodec{deltaCodec{}, &faultCodec{}}}, "listed twice"},
		{"negative max", Config{MaxCodedMessage: -1}, "MaxCodedMessage"},
		{"max too large", Config{MaxCodedMessage: 1<<30 + 1}, "MaxCodedMessage"},
		{"retention below max", Config{MaxCodedMessage: 4 << 20, CodecRetention: 1 << 20}, "CodecRetention"},
		{"retention defaults to max", Config{MaxCodedMessage: 16 << 20}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.want)
		})
	}
	h := codecConfig("n", 0).withDefaults().hello()
	require.Equal(t, frame.CodecIDs{0, deltaID, reverseID}, h.Codecs)
	require.Equal(t, uint32(1<<20), h.MaxCoded)
	require.Zero(t, (&Config{}).withDefaults().hello().MaxCoded, "no codecs: nothing coded is taken")
}

type zeroCodec struct{ deltaCodec }

func (zeroCodec) ID() uint8 { return 0 }

type bigCodec struct{ deltaCodec }

func (bigCodec) ID() uint8 { return 128 }

func TestPrefer(t *testing.T) {
	peer := func(id uint8) bool { return id == 0 || id == 3 }
	require.Equal(t, uint8(3), Prefer(0, 2, 3, 4).Choose([]byte("x"), peer))
	require.Equal(t, uint8(0), Prefer(0, 2).Choose([]byte("x"), peer))
	require.Equal(t, uint8(0), Prefer(10, 3).Choose([]byte("short"), peer))
	require.Equal(t, uint8(3), Prefer(5, 3).Choose([]byte("short"), peer))
}

// deltaV2 is deltaCodec announcing another wire format, as a newer release would.
type deltaV2 struct{ deltaCodec }

func (deltaV2) Format() uint32 { return 2 }

// Two gateways with the same codec id in different wire formats do not use it: each
// falls back to the next codec both speak alike (here reverse), and says which codec it
// dropped. Messages arrive intact and no resync or NACK happens.
func TestCodecFormatMismatchFallsBack(t *testing.T) {
	testConnTypes(t, func(t *testing.T, pair connPair) {
		prefer := Prefer(0, deltaID, reverseID)
		ccfg, scfg := codecConfig("edge", 64<<10), codecConfig("origin", 64<<10)
		ccfg.Encoding, scfg.Encoding = prefer, prefer
		scfg.Codecs = []MessageCodec{deltaV2{}, reverseCodec{}}
		cm, sm := NewMetrics(nil), NewMetrics(nil)
		c, s := sessionPairMetrics(t, pair, ccfg, scfg, cm, sm)
		echoServer(t, s)
		require.Equal(t, []uint8{deltaID}, c.FormatMismatches())
		require.Equal(t, []uint8{deltaID}, s.FormatMismatches())
		require.Equal(t, 1.0, testutil.ToFloat64(cm.formats.WithLabelValues("test", "delta")))
		require.Equal(t, 1.0, testutil.ToFloat64(sm.formats.WithLabelValues("edge", "delta")))
		require.False(t, c.PeerSupports(deltaID))
		require.True(t, c.PeerSupports(reverseID))
		for i := range 20 {
			msg := testMsg(500+i, i)
			got, codec, err := exchangeCoded(context.Background(), c, msg)
			require.NoError(t, err)
			require.True(t, bytes.Equal(append([]byte("re:"), msg...), got), "message %d", i)
			require.Equal(t, reverseID, codec, "message %d: response codec", i)
		}
		require.Equal(t, float64(20), messages(cm, "test", "sent", "reverse"))
		require.Zero(t, messages(cm, "test", "sent", "delta"))
		require.Zero(t, resyncs(cm, "test")+resyncs(sm, "edge"))

		// Matching formats keep the codec.
		c2, _ := sessionPair(t, pair, codecConfig("edge", 1024), codecConfig("origin", 1024))
		require.Empty(t, c2.FormatMismatches())
		require.True(t, c2.PeerSupports(deltaID))
	})
}
