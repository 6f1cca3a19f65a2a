package tunnel

import (
	"context"
	"hash/crc32"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

// fuzzSeeds are valid (and a few deliberately invalid) frame sequences a peer might send
// after HELLO.
func fuzzSeeds() [][]byte {
	msg := []byte("<soap:Envelope><soap:Body><ping/></soap:Body></soap:Envelope>")
	sum := crc32.Checksum(msg, castagnoli)
	ping := frame.AppendPing(nil, 42)
	var seeds [][]byte

	seeds = append(seeds, wholeMessage(nil, 1, msg))
	// One message in three frames, two streams interleaved, flow control and a reset.
	var b []byte
	b = dataFrame(b, 1, true, false, msg[:10], 0)
	b = dataFrame(b, 3, true, false, msg[:5], 0)
	b = dataFrame(b, 1, false, false, msg[10:30], 0)
	b = appendFrame(b, frame.TypeWindowUpdate, 0, 2, frame.AppendWindowUpdate(nil, 1000))
	b = appendFrame(b, frame.TypeRSTStream, 0, 3, frame.AppendRST(nil, frame.CodeCancel, "bye"))
	b = dataFrame(b, 1, false, true, msg[30:], sum)
	seeds = append(seeds, b)
	// Control frames.
	b = appendFrame(nil, frame.TypePing, 0, 0, ping)
	b = appendFrame(b, frame.TypePing, frame.FlagAck, 0, ping)
	b = appendFrame(b, 0x7f, 0xff, 9, []byte("unknown type, ignored"))
	b = appendFrame(b, frame.TypeGoAway, 0, 0, frame.AppendGoAway(nil, 0, frame.CodeNoError, "restart"))
	seeds = append(seeds, b)
	// Many streams, one with a bad checksum, one with an unknown codec.
	b = nil
	for id := uint32(1); id < 40; id += 2 {
		b = wholeMessage(b, id, msg)
	}
	b = dataFrame(b, 41, true, true, msg, sum^1)
	b = appendFrame(b, frame.TypeData, frame.FlagStart|frame.FlagEnd, 43, append(frame.Preamble{Codec: 9}.Append(nil), 0, 0, 0, 0))
	seeds = append(seeds, b)
	// Empty message, then stray frames for finished and never-opened streams.
	b = dataFrame(nil, 1, true, true, nil, 0)
	b = dataFrame(b, 1, false, true, nil, 0)
	b = appendFrame(b, frame.TypeWindowUpdate, 0, 99, frame.AppendWindowUpdate(nil, 1<<31-1))
	b = appendFrame(b, frame.TypeRSTStream, 0, 101, frame.AppendRST(nil, frame.CodeRefused, ""))
	seeds = append(seeds, b)
	// Coded messages (delta codec): whole, split, with a piggybacked ack the session does
	// not owe (a protocol error), one that fails to decode and breaks the epoch, one of
	// the next epoch, an unknown codec, and acknowledgement frames.
	var enc rawEncoder
	b = enc.message(nil, 1, 1, 0, msg)
	payload, _ := enc.enc.Encode(nil, msg)
	b = codedMessage(b, 3, deltaID, 1, 0, payload, sum, 7)
	b = codedMessage(b, 5, deltaID, 1, 0, []byte{0xff, 1, 2}, sum, 0)
	b = enc.message(b, 7, 1, 0, msg)
	var enc2 rawEncoder
	b = enc2.message(b, 9, 2, 0, msg)
	b = codedMessage(b, 11, 9, 2, 0, msg, sum, 0)
	b = appendFrame(b, frame.TypeCodecNack, 0, 9, frame.AppendCodecNack(nil, 2, "decode"))
	b = appendFrame(b, frame.TypeCodecAck, 0, 0, frame.AppendCodecAck(nil, 1))
	seeds = append(seeds, b, enc2.message(nil, 1, 1, 3, msg))
	b = enc.message(nil, 1, 1, 0, msg)
	b = appendFrame(b, frame.TypeData, frame.FlagStart, 3, frame.Preamble{Codec: deltaID, Epoch: 1}.Append(nil))
	b = wholeMessage(b, 5, msg) // inside the coded message of stream 3
	seeds = append(seeds, b)

	// Protocol violations.
	seeds = append(seeds,
		dataFrame(nil, 5, false, false, msg, 0),
		dataFrame(dataFrame(nil, 5, true, false, msg, 0), 5, true, false, msg, 0),
		frame.Header{Length: 1 << 20, Type: frame.TypeData, StreamID: 1}.Append(nil),
		helloFrame(rawHello()),
		[]byte{0, 0},
	)
	return seeds
}

// FuzzSessionInput feeds arbitrary bytes, after a valid HELLO, as the peer's frame stream
// into a ServerSession over net.Pipe. The session must never panic or deadlock, and its
// memory must stay within max_streams × window whatever it is sent.
func FuzzSessionInput(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		const maxStreams, window = 8, 64 << 10
		// Coded messages are decoded up to MaxCodedMessage = window, so a stream still
		// holds at most a window's worth of message bytes.
		// The raw peer never acknowledges the session's coded responses: their streams
		// linger, outside max_streams but within CodecRetention.
		const retention = 64 * retainOverhead // = window: at least MaxCodedMessage
		cfg := &Config{MaxStreams: maxStreams, StreamWindow: window, KeepaliveInterval: 0, WriteTimeout: 2 * time.Second,
			Codecs: []MessageCodec{deltaCodec{}}, Encoding: preferDelta, MaxCodedMessage: window, CodecRetention: retention}
		raw, conn := net.Pipe()
		s, err := rawServerSession(t, raw, conn, cfg, codedHello())
		if err != nil {
			t.Fatal(err)
		}
		drained := make(chan struct{})
		go func() { _, _ = io.Copy(io.Discard, raw); close(drained) }()
		echoServer(t, s)

		_ = raw.SetWriteDeadline(time.Now().Add(2 * time.Second))
		_, _ = raw.Write(in) // fails early if the session gave up on the input: fine

		s.mu.Lock()
		n, buffered, lingering := len(s.streams), 0, s.lingering
		streams := make([]*Stream, 0, n)
		for _, st := range s.streams {
			streams = append(streams, st)
		}
		s.mu.Unlock()
		for _, st := range streams {
			buffered += bufferedForTest(st)
		}
		if n-lingering > maxStreams || buffered > maxStreams*window {
			t.Fatalf("%d streams (%d lingering), %d bytes buffered: beyond max_streams × window", n, lingering, buffered)
		}
		if lingering > retention/retainOverhead {
			t.Fatalf("%d streams lingering: beyond CodecRetention", lingering)
		}

		closed := make(chan struct{})
		go func() { _ = s.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(3 * time.Second):
			t.Fatal("Session.Close hung")
		}
		// A closing session refuses new streams, so none is left behind (regression test:
		// TestStreamOpenedWhileClosingIsRefused).
		if n := s.NumStreams(); n != 0 {
			t.Fatalf("%d streams left after Close", n)
		}
		_ = raw.Close()
		<-drained
	})
}

// TestStreamOpenedWhileClosingIsRefused (found by FuzzSessionInput): recvLoop used to keep
// handling frames already in its buffer after closeWithError had failed every stream, so a
// START among them created a stream that was never failed (NumStreams > 0 after Close, a
// Read that blocked forever). New streams are now refused once the session is closing.
func TestStreamOpenedWhileClosingIsRefused(t *testing.T) {
	raw, s := rawTCPServerSession(t, &Config{KeepaliveInterval: 0})
	_, err := raw.Write(dataFrame(nil, 1, true, false, []byte("<a"), 0))
	require.NoError(t, err)
	st1, err := s.AcceptStream(context.Background())
	require.NoError(t, err)

	// Hold stream 1 so recvLoop stops inside the next frame for it, with stream 3's START
	// already read into its buffer.
	st1.mu.Lock()
	var b []byte
	b = dataFrame(b, 1, false, false, []byte("/>"), 0)
	b = dataFrame(b, 3, true, false, []byte("<b"), 0)
	_, err = raw.Write(b)
	require.NoError(t, err)
	waitRecvLoopBlockedOnMutex(t)
	closed := make(chan struct{})
	go func() { _ = s.Close(); close(closed) }()
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.Err() != nil && len(s.streams) == 0 // closeWithError has failed the map
	}, 2*time.Second, time.Millisecond)
	st1.mu.Unlock()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("Close hung")
	}

	if n := s.NumStreams(); n != 0 {
		t.Errorf("%d stream(s) registered after the session closed", n)
	}
	select {
	case st3 := <-s.acceptCh:
		require.NoError(t, st3.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
		_, err := io.ReadAll(st3)
		require.ErrorIs(t, err, ErrSessionClosed, "Read on a stream of a closed session must fail, not wait")
	default:
	}
}

// Regression tests for inputs the fuzzer found live in testdata/fuzz/FuzzSessionInput and
// run with every go test.

// waitRecvLoopBlockedOnMutex waits until the session's receive goroutine is parked
// on a mutex (the stream lock the test holds). It reads the goroutine stacks rather
// than sleeping, so it neither passes early on a busy machine nor waits longer than
// needed; synctest cannot help here, a goroutine blocked on a sync.Mutex is not
// "durably blocked" to it.
func waitRecvLoopBlockedOnMutex(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	require.Eventually(t, func() bool {
		stacks := string(buf[:runtime.Stack(buf, true)])
		for _, g := range strings.Split(stacks, "\n\n") {
			if strings.Contains(g, "(*Session).recvLoop") && strings.Contains(g, "sync.(*Mutex).Lock") {
				return true
			}
		}
		return false
	}, 5*time.Second, time.Millisecond, "recvLoop never blocked on the held stream lock")
}
