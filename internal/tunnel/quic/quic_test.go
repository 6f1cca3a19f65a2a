package quic

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/codec"
	"github.com/soapgw/soapgw/internal/peerauth"
	"github.com/soapgw/soapgw/internal/tunnel"
)

func TestUDPExchangeSequential(t *testing.T) {
	p := newPair(t, pairOptions{codecs: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 200
	p.echoCalls(t, ctx, 0, n, 700)
	// Sequential calls never find the lane busy: every message is sequenced (one fresh).
	sent := p.counter(t, "soapgw_udp_codec_messages_total", "peer", "origin", "direction", "sent", "codec", "token")
	seq := p.counter(t, "soapgw_udp_codec_messages_total", "peer", "origin", "direction", "sent", "mode", "sequenced")
	require.Equal(t, float64(n), sent)
	require.GreaterOrEqual(t, seq, float64(n-1))
	require.Zero(t, p.counter(t, "soapgw_udp_codec_nacks_total"))
	raw := p.counter(t, "soapgw_udp_codec_raw_bytes_total", "peer", "origin", "direction", "sent")
	coded := p.counter(t, "soapgw_udp_codec_payload_bytes_total", "peer", "origin", "direction", "sent")
	t.Logf("requests: %d, raw %.0f B/msg, coded %.1f B/msg", n, raw/n, coded/n)
	require.Less(t, coded, raw/4, "the token codec compresses sequenced messages")
}

func TestUDPExchangeConcurrent(t *testing.T) {
	p := newPair(t, pairOptions{codecs: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p.callConcurrently(t, ctx, 16, 40, func(w, i int) []byte { return soapMessage(w*1000+i, 300+w*97) })
	require.Zero(t, p.counter(t, "soapgw_udp_codec_nacks_total"))
}

// paddedCodec is a codec whose payloads are pad bytes longer than its inner codec's: it
// codes messages larger than they are, as incompressible bytes do on a smaller scale.
type paddedCodec struct {
	tunnel.MessageCodec
	pad int
}

func (c paddedCodec) NewEncoder() (tunnel.MessageEncoder, error) {
	e, err := c.MessageCodec.NewEncoder()
	return paddedEncoder{e, c.pad}, err
}

func (c paddedCodec) NewDecoder(max int) (tunnel.MessageDecoder, error) {
	d, err := c.MessageCodec.NewDecoder(max)
	return paddedDecoder{d, c.pad}, err
}

type paddedEncoder struct {
	tunnel.MessageEncoder
	pad int
}

func (e paddedEncoder) Encode(dst, msg []byte) ([]byte, error) {
	return e.MessageEncoder.Encode(append(dst, make([]byte, e.pad)...), msg)
}

type paddedDecoder struct {
	tunnel.MessageDecoder
	pad int
}

func (d paddedDecoder) Decode(dst, payload []byte) ([]byte, error) {
	if len(payload) < d.pad {
		return dst, errors.New("padded payload too short")
	}
	return d.MessageDecoder.Decode(dst, payload[d.pad:])
}

// TestUDPMessagesCodedPastTheirSize: a message is coded into the buffer it is sent from,
// after room for its head; one whose payload outgrows that buffer (raw size plus a
// little) is sent from one of its own, intact. Both ways, stateful and stateless codecs,
// sizes around the slack.
func TestUDPMessagesCodedPastTheirSize(t *testing.T) {
	for _, name := range []string{"token", "gzip"} {
		for _, pad := range []int{0, codedSlack - 8, codedSlack + 1, 5000} {
			t.Run(fmt.Sprintf("%s/pad-%d", name, pad), func(t *testing.T) {
				enc, err := codec.NewPolicy(name, 0)
				require.NoError(t, err)
				p := newPair(t, pairOptions{codecs: true, encoding: enc, codecList: func(t testing.TB) []tunnel.MessageCodec {
					var out []tunnel.MessageCodec
					for _, c := range testCodecs(t) {
						out = append(out, paddedCodec{c, pad})
					}
					return out
				}})
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				for i, size := range []int{40, 300, 2000} {
					req := soapMessage(i, size)
					resp, err := p.call(ctx, req)
					require.NoError(t, err)
					require.Equal(t, append([]byte("echo:"), req...), resp)
				}
				require.Equal(t, float64(6), p.counter(t, "soapgw_udp_codec_messages_total", "codec", name, "direction", "sent"),
					"every message went coded")
			})
		}
	}
}

// TestUDPLossSafeCache: a sequenced message whose bytes are held back (as by a lost
// packet) holds up no other message. The tail of message A, sequenced, is withheld; message
// B, sent meanwhile, is coded stateless (the lane is A's), decoded and answered at once; A
// completes intact once its tail is released, and the codec state is still in step.
// (Real packet loss, with QUIC packing streams together, is exercised in e2e through the
// link emulator; here the hold is exact.)
func TestUDPLossSafeCache(t *testing.T) {
	p := newPair(t, pairOptions{codecs: true, window: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 5 { // warm up: connection up, lanes idle
		_, err := p.call(ctx, soapMessage(i, 500))
		require.NoError(t, err)
	}
	reached := make(chan int, 4)
	p.setHandler(func(ctx context.Context, st *Stream) {
		defer st.Close()
		req, err := io.ReadAll(st)
		if err != nil {
			return
		}
		reached <- len(req)
		_, _ = st.Write(append([]byte("echo:"), req...))
		_ = st.CloseWrite()
	})
	a := soapMessage(1, 2000)
	held, release := holdSecondHalf(t, len(a))
	aDone := p.callAsync(ctx, a)
	<-held
	busyBefore := p.counter(t, "soapgw_udp_codec_lane_busy_total", "peer", "origin")
	b := soapMessage(2, 400)
	resp, err := p.call(ctx, b)
	require.NoError(t, err)
	require.Equal(t, append([]byte("echo:"), b...), resp)
	require.Equal(t, len(b), <-reached, "B reached the server while A was held")
	require.Equal(t, busyBefore+1, p.counter(t, "soapgw_udp_codec_lane_busy_total", "peer", "origin"), "B went stateless: the lane was A's")
	select {
	case err := <-aDone:
		t.Fatalf("A finished while its tail was held: %v", err)
	default:
	}

	close(release)
	require.NoError(t, <-aDone)
	require.Equal(t, len(a), <-reached)
	// The lane is free again and both states in step: the next call is sequenced.
	seqBefore := p.counter(t, "soapgw_udp_codec_messages_total", "peer", "origin", "direction", "sent", "mode", "sequenced")
	_, err = p.call(ctx, soapMessage(3, 500))
	require.NoError(t, err)
	require.Equal(t, seqBefore+1, p.counter(t, "soapgw_udp_codec_messages_total", "peer", "origin", "direction", "sent", "mode", "sequenced"))
	require.Zero(t, p.counter(t, "soapgw_udp_codec_nacks_total"))
}

// Messages larger than max_coded stream: coded as they go (zstd-streaming) when both
// sides have the stream codec, as identity otherwise; byte for byte either way.
func TestUDPLargeMessagesStream(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream bool
		codec  string
	}{
		{"coded as they stream", true, "zstd-streaming"},
		{"no stream codec", false, "identity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOptions{codecs: true, stream: tc.stream})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			big := bytes.Repeat([]byte("<row><id>0123456789</id><name>abcdef</name></row>"), 3<<20/48) // 3 MiB: above max_coded
			resp, err := p.call(ctx, big)
			require.NoError(t, err)
			require.Equal(t, len(big)+5, len(resp))
			require.True(t, bytes.Equal(resp[5:], big))
			for _, peer := range []string{"origin", "edge"} {
				require.Equal(t, float64(1), p.counter(t, "soapgw_udp_codec_messages_total", "peer", peer, "direction", "sent", "codec", tc.codec), "sent by the side whose peer is %s", peer)
				require.Equal(t, float64(1), p.counter(t, "soapgw_udp_codec_messages_total", "peer", peer, "direction", "received", "codec", tc.codec))
			}
			raw := p.counter(t, "soapgw_udp_codec_raw_bytes_total", "peer", "origin", "direction", "sent", "codec", tc.codec)
			coded := p.counter(t, "soapgw_udp_codec_payload_bytes_total", "peer", "origin", "direction", "sent", "codec", tc.codec)
			require.Equal(t, float64(len(big)), raw)
			if tc.stream {
				require.Less(t, coded, raw/20, "coded on the link")
			}
		})
	}
}

// A message flushed before its end streams coded, and what was flushed reaches the
// reader before the message ends, at every flush.
func TestUDPFlushedMessageStreamsCoded(t *testing.T) {
	p := newPair(t, pairOptions{codecs: true, stream: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	next := make(chan struct{})
	parts := []string{"<a>first part of a slow answer</a>", "<b>second</b>", "<c>third</c>"}
	p.setHandler(func(_ context.Context, st *Stream) {
		defer st.Close()
		if _, err := io.ReadAll(st); err != nil {
			return
		}
		for i, part := range parts {
			_, _ = st.Write([]byte(part))
			if i+1 < len(parts) {
				_ = st.Flush()
				select {
				case <-next:
				case <-ctx.Done():
					return
				}
			}
		}
		_ = st.CloseWrite()
	})
	st, err := p.peer.OpenStream(ctx)
	require.NoError(t, err)
	defer st.Close()
	_, err = st.Write([]byte("<req/>"))
	require.NoError(t, err)
	require.NoError(t, st.CloseWrite())
	require.NoError(t, st.SetDeadline(time.Now().Add(10*time.Second)))
	for i, part := range parts {
		buf := make([]byte, len(part))
		_, err := io.ReadFull(st, buf)
		require.NoError(t, err, "part %d", i)
		require.Equal(t, part, string(buf))
		if i+1 < len(parts) {
			next <- struct{}{}
		}
	}
	rest, err := io.ReadAll(st)
	require.NoError(t, err)
	require.Empty(t, rest)
	require.Equal(t, float64(1), p.counter(t, "soapgw_udp_codec_messages_total", "peer", "edge", "direction", "sent", "codec", "zstd-streaming", "mode", "streamed"))
}

func TestUDPAuthWrongKeyRefused(t *testing.T) {
	other, err := peerauth.GenerateKey()
	require.NoError(t, err)
	p := newPair(t, pairOptions{edgeKey: other})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = p.call(ctx, []byte("hello"))
	require.ErrorIs(t, err, tunnel.ErrNoPeer)
	require.Eventually(t, func() bool {
		return p.counter(t, "soapgw_udp_handshakes_total", "result", "bad_key") > 0
	}, 5*time.Second, 10*time.Millisecond)
	require.Zero(t, p.counter(t, "soapgw_udp_handshakes_total", "result", "ok"))
}

func TestUDPNoCodecs(t *testing.T) {
	testUDPEcho(t, newPair(t, pairOptions{}))
}

// TestUDPInsecure: insecure: true on both sides still works over QUIC (which encrypts
// anyway); the origin counts the connection as ok without any proof.
func TestUDPInsecure(t *testing.T) {
	p := newPair(t, pairOptions{insecure: true, codecs: true})
	testUDPEcho(t, p)
	require.Equal(t, 1.0, p.counter(t, "soapgw_udp_handshakes_total", "result", "ok"))
}

func testUDPEcho(t *testing.T, p *pair) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.echoCalls(t, ctx, 0, 20, 900)
}

var _ = codec.Token

// TestUDPNotSentIsRetryable: an exchange whose connection closed before any of its bytes
// left reports an error the edge may retry (the origin never saw it).
func TestUDPNotSentIsRetryable(t *testing.T) {
	p := newPair(t, pairOptions{codecs: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := p.peer.OpenStream(ctx)
	require.NoError(t, err)
	defer st.Close()
	_, err = st.Write(soapMessage(1, 300))
	require.NoError(t, err)
	st.c.close(closeNormal, "test")
	<-st.c.done()
	err = st.CloseWrite()
	require.Error(t, err)
	var r interface{ Retryable() bool }
	require.ErrorAs(t, err, &r)
	require.True(t, r.Retryable(), "%v", err)
}

// TestUDPPathDarkIsConnectionLost: when the path stops carrying packets mid-exchange, the
// exchange fails once the idle timeout passes with the keepalive timeout error the TCP
// tunnel gives, not with a net.Error timeout: a caller must not take a lost connection
// for the exchange's own deadline (the edge answered 504 "no response within 1m0s" after
// 1.5 s).
func TestUDPPathDarkIsConnectionLost(t *testing.T) {
	p := newPair(t, pairOptions{codecs: true, keepalive: 500 * time.Millisecond}) // idle timeout 1.5 s
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := p.call(ctx, soapMessage(1, 300))
	require.NoError(t, err)
	p.edgeSock.Load().dark.Store(true)
	start := time.Now()
	_, err = p.call(ctx, soapMessage(2, 300))
	require.ErrorIs(t, err, tunnel.ErrKeepaliveTimeout)
	var timeout interface{ Timeout() bool }
	require.False(t, errors.As(err, &timeout) && timeout.Timeout(), "a lost connection is not an exchange timeout: %v", err)
	require.Less(t, time.Since(start), 10*time.Second, "the idle timeout, not the call's deadline, ended it")
}

// TestUDPAutoWindowNarrowsUnderLoss: the default (auto) sequenced window is wide while no
// message waits for another; once one waited for an earlier one's held-back (lost) bytes,
// the receiver says so and the window is 1: the next held-back message delays nothing.
func TestUDPAutoWindowNarrowsUnderLoss(t *testing.T) {
	p := newPair(t, pairOptions{codecs: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	window := func() float64 { return p.counter(t, "soapgw_udp_codec_window", "peer", "origin") }
	for i := range 5 {
		_, err := p.call(ctx, soapMessage(i, 500))
		require.NoError(t, err)
	}
	require.Equal(t, float64(autoWindowWide), window(), "no waits yet: wide")

	// A message whose first part arrived and whose rest comes late (serialization behind
	// other streams on a slow link) makes the next one wait, but that is no loss: wide.
	slow := soapMessage(7, 2000)
	held0, release0 := holdSecondHalf(t, len(slow))
	slowDone := p.callAsync(ctx, slow)
	<-held0
	waits0 := p.counter(t, "soapgw_udp_codec_decode_waits_total", "peer", "edge")
	nextDone := p.callAsync(ctx, soapMessage(8, 400))
	require.Eventually(t, func() bool {
		return p.counter(t, "soapgw_udp_codec_decode_waits_total", "peer", "edge") > waits0
	}, 5*time.Second, time.Millisecond)
	time.Sleep(longWait) // a wait as long as a loss recovery's
	close(release0)
	require.NoError(t, <-slowDone)
	require.NoError(t, <-nextDone)
	require.Zero(t, p.counter(t, "soapgw_udp_codec_waited_reports_total", "peer", "edge"), "a late tail is serialization, not loss: no WAITED")
	require.Equal(t, float64(autoWindowWide), window())

	// Wide: B is coded on A's state and must wait for A, held back whole (as a lost
	// one-packet message would be).
	a := soapMessage(1, 2000)
	held, release := holdWhole(t, len(a))
	aDone := p.callAsync(ctx, a)
	<-held
	waits := p.counter(t, "soapgw_udp_codec_decode_waits_total", "peer", "edge")
	bDone := p.callAsync(ctx, soapMessage(2, 400))
	require.Eventually(t, func() bool {
		return p.counter(t, "soapgw_udp_codec_decode_waits_total", "peer", "edge") > waits
	}, 5*time.Second, time.Millisecond, "B waits for A at the origin")
	time.Sleep(longWait) // the hold lasts as long as a loss recovery would (shorter waits are reordering, not reported)
	close(release)
	require.NoError(t, <-aDone)
	require.NoError(t, <-bDone)
	require.Equal(t, 1.0, p.counter(t, "soapgw_udp_codec_waited_reports_total", "peer", "edge"), "a late first packet is a loss: WAITED")
	require.Eventually(t, func() bool { return window() == 1 }, 5*time.Second, time.Millisecond, "WAITED made the window strict")

	// Strict: C goes stateless and is answered while A2 is held.
	a2 := soapMessage(3, 2100)
	held, release = holdSecondHalf(t, len(a2))
	a2Done := p.callAsync(ctx, a2)
	<-held
	_, err := p.call(ctx, soapMessage(4, 400))
	require.NoError(t, err, "C is not held up by A2")
	select {
	case err := <-a2Done:
		t.Fatalf("A2 finished while held: %v", err)
	default:
	}
	close(release)
	require.NoError(t, <-a2Done)
	require.Zero(t, p.counter(t, "soapgw_udp_codec_nacks_total"))
}

// TestSequentialExchangeOnePacketEachWay: on a long path, each side sends one packet per
// sequential exchange, carrying the message with the acknowledgements and the stream
// credit due, and nothing more. The origin used to give back each finished stream's credit
// after a fixed 50 ms, before the edge had acknowledged the response; quic-go then sent
// MAX_STREAMS alone when the acknowledgement came, and that second packet made the edge
// acknowledge at once: two packets each way per exchange, and on a slow link a request
// queued behind an ACK.
func TestSequentialExchangeOnePacketEachWay(t *testing.T) {
	testNoPathMTUDiscovery.Store(true)
	t.Cleanup(func() { testNoPathMTUDiscovery.Store(false) })
	p := newPair(t, pairOptions{codecs: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := p.call(ctx, soapMessage(0, 600)) // connection up, codec state warm
	require.NoError(t, err)
	p.edgeSock.Load().delay.Store(int64(150 * time.Millisecond))
	for i := range 10 { // the RTT estimate learns the longer path (1/8 per sample)
		_, err := p.call(ctx, soapMessage(i, 600))
		require.NoError(t, err)
	}
	sent := func() float64 { return p.counter(t, "soapgw_udp_packets_total", "peer", "edge", "kind", "sent") }
	// The edge's side is left out: on a busy machine its next request may come after
	// quic-go's 25 ms ACK delay. The origin too sends an ACK alone when its answer takes
	// longer than that (a starved machine, the race detector): slack for some, and a few
	// rounds (one CI run on a loaded machine saw 1.9 in a round, unexplained and never
	// again). Two per exchange, every time, was the bug.
	const calls, rounds = 20, 3
	var perExchange []float64
	for r := range rounds {
		sent0 := sent()
		p.echoCalls(t, ctx, r*calls, calls, 600)
		perExchange = append(perExchange, (sent()-sent0)/calls)
		t.Logf("the origin sent %.2f packets per exchange", perExchange[r])
		if perExchange[r] <= 1.5 {
			return
		}
	}
	t.Fatalf("the origin sent more than 1.5 packets per exchange in every round: %v", perExchange)
}

// TestBulkMessagesCodedBehindFullWindow: with the window at 1 (a lossy path), messages
// sent at once go stateless, except bulk ones (one-way deliveries from the spool), which
// are coded on the shared state behind each other (more than the bulk window of them wait
// for room rather than going stateless) and decoded in order at the receiver, byte for
// byte, whatever order their streams arrive in.
func TestBulkMessagesCodedBehindFullWindow(t *testing.T) {
	// 300 exchanges at once with the race detector on a busy machine can leave the
	// connection without a packet for longer than the harness's 2 s keepalive.
	// A bulk window below the default: more exchanges than it at once, all of them
	// within the origin's stream limit (1,024).
	const testBulkWindow = 256
	p := newPair(t, pairOptions{codecs: true, window: 1, bulkWindow: testBulkWindow, keepalive: 10 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := p.call(ctx, soapMessage(0, 500))
	require.NoError(t, err)
	sent := func(mode string) float64 {
		return p.counter(t, "soapgw_udp_codec_messages_total", "peer", "origin", "direction", "sent", "mode", mode)
	}
	// Each handler holds its request unanswered until all of them are in, so every
	// message is sent while the others are unacknowledged.
	const n = testBulkWindow + 44
	type gate struct {
		arrived sync.WaitGroup
		all     chan struct{}
	}
	var current atomic.Pointer[gate]
	newGate := func(n int) {
		g := &gate{all: make(chan struct{})}
		g.arrived.Add(n)
		go func() { g.arrived.Wait(); close(g.all) }()
		current.Store(g)
	}
	p.setHandler(func(ctx context.Context, st *Stream) {
		defer st.Close()
		g := current.Load()
		req, err := io.ReadAll(st)
		g.arrived.Done()
		if err != nil {
			return
		}
		select {
		case <-g.all:
		case <-ctx.Done():
			return
		}
		_, _ = st.Write(append([]byte("echo:"), req...))
		_ = st.CloseWrite()
	})
	run := func(bulk bool, n int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				st, err := p.peer.OpenStream(ctx)
				if err != nil {
					errs <- err
					return
				}
				defer st.Close()
				if bulk {
					st.SetBulk()
				}
				req := soapMessage(i, 400+13*i)
				if _, err = st.Write(req); err == nil {
					err = st.CloseWrite()
				}
				var resp []byte
				if err == nil {
					resp, err = io.ReadAll(st)
				}
				if err == nil && !bytes.Equal(resp, append([]byte("echo:"), req...)) {
					err = fmt.Errorf("call %d: response mixed up", i)
				}
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	}

	// The counters are the edge's (requests); the responses, not bulk, go stateless at
	// the origin.
	seq0, stateless0 := sent("sequenced")+sent("fresh"), sent("stateless")
	newGate(n)
	run(true, n)
	seq1, stateless1 := sent("sequenced")+sent("fresh"), sent("stateless")
	require.Equal(t, float64(n), seq1-seq0, "every bulk request coded on the shared state")
	require.Equal(t, stateless0, stateless1, "no bulk request coded on its own")

	newGate(48)
	run(false, 48)
	require.Greater(t, sent("stateless")-stateless1, float64(24), "interactive requests behind a full window go stateless")
}

// goroutineID is the running goroutine's id, from its stack header.
func goroutineID() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	return strings.Fields(string(b))[1] // "goroutine 123 [running]:"
}

// TestServerHandlersReuseWorkers: through a real pair, sequential exchanges run on
// goroutines that serve one exchange after another, not one each. How many depends on how
// many handlers ran at once, which a busy host decides (a stream lock's holder descheduled
// for a few ms keeps dozens of handlers in their last step while the calls go on), so the
// exact bounds are TestHandlerWorkers'.
func TestServerHandlersReuseWorkers(t *testing.T) {
	p := newPair(t, pairOptions{})
	var mu sync.Mutex
	ran := map[string]int{}
	p.setHandler(func(ctx context.Context, st *Stream) {
		mu.Lock()
		ran[goroutineID()]++
		mu.Unlock()
		echoHandler(ctx, st)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const calls = 200
	for range calls {
		got, err := p.call(ctx, []byte("x"))
		require.NoError(t, err)
		require.Equal(t, "echo:x", string(got))
	}
	mu.Lock()
	defer mu.Unlock()
	require.Less(t, len(ran), calls/2, "%d sequential exchanges, goroutines", calls)
}

// TestHandlerWorkers: a worker serves exchange after exchange; a burst gets a worker per
// exchange; afterwards maxIdleWorkers of them wait and serve the next exchanges, the rest
// end; stop ends those waiting. (Fake time: every step runs until all goroutines block.)
func TestHandlerWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			ran     = map[string]int{}
			hold    atomic.Bool
			release = make(chan struct{})
		)
		w := newHandlerWorkers(t.Context(), func(context.Context, *Stream) {
			mu.Lock()
			ran[goroutineID()]++
			mu.Unlock()
			if hold.Load() {
				<-release
			}
		}, &wg)
		taken := func() map[string]int {
			mu.Lock()
			defer mu.Unlock()
			m := maps.Clone(ran)
			clear(ran)
			return m
		}
		for range 100 {
			w.serve(&Stream{})
			synctest.Wait()
		}
		require.Len(t, taken(), 1, "sequential exchanges, goroutines")

		const n = 2 * maxIdleWorkers
		hold.Store(true)
		for range n {
			w.serve(&Stream{})
			synctest.Wait()
		}
		burst := taken()
		require.Len(t, burst, n, "a burst's exchanges each on a worker of its own")
		hold.Store(false)
		close(release)
		synctest.Wait()
		require.EqualValues(t, maxIdleWorkers, w.waiting.Load(), "workers left waiting")

		for range 50 {
			w.serve(&Stream{})
			synctest.Wait()
		}
		for id := range taken() {
			require.Contains(t, burst, id, "after the burst, exchanges run on waiting workers")
		}
		// Exchanges in a row, each promised to a waiting worker before it has even run:
		// as many as wait, and no goroutine starts.
		for range maxIdleWorkers {
			w.serve(&Stream{})
		}
		synctest.Wait()
		again := taken()
		require.Len(t, again, maxIdleWorkers)
		for id := range again {
			require.Contains(t, burst, id, "exchanges in a row run on the waiting workers")
		}
		w.stop()
		wg.Wait()
	})
}

// TestUDPAnswerOutlivesStopSending: the origin answers a request it has not read whole
// (the server answered early) and closes the stream, which asks the edge to stop sending:
// at once, or after draining the request until a deadline (its drain's time bound). The
// edge's next write fails with a reset by the peer, and the answer still reads byte for
// byte: the edge relays it instead of a tunnel_lost fault.
func TestUDPAnswerOutlivesStopSending(t *testing.T) {
	for _, drain := range []bool{false, true} {
		t.Run(fmt.Sprintf("drain=%t", drain), func(t *testing.T) {
			p := newPair(t, pairOptions{codecs: true})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			answer := soapMessage(7, 300)
			p.setHandler(func(_ context.Context, st *Stream) {
				defer st.Close() // the request unfinished: STOP_SENDING
				if _, err := st.Read(make([]byte, 10)); err != nil {
					return
				}
				_, _ = st.Write(answer)
				_ = st.CloseWrite()
				if drain {
					_ = st.SetDeadline(time.Now().Add(100 * time.Millisecond))
					_, _ = io.Copy(io.Discard, st) // until the deadline: the edge never ends
				}
			})
			st, err := p.peer.OpenStream(ctx)
			require.NoError(t, err)
			defer st.Close()
			require.NoError(t, st.SetDeadline(time.Now().Add(5*time.Second))) // a write the origin never stops fails the test, not hangs it
			chunk := make([]byte, 64<<10)
			for err == nil { // more than max_coded: the request streams until the peer stops it
				_, err = st.Write(chunk)
			}
			var rp interface{ ResetByPeer() bool }
			require.True(t, errors.As(err, &rp) && rp.ResetByPeer(), "the write failed, not by the peer's stop: %v", err)
			got, err := io.ReadAll(st)
			require.NoError(t, err, "the answer was dropped")
			require.Equal(t, answer, got)
		})
	}
}
