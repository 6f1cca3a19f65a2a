package tunnel

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

// ---- raw wire helpers: a hand-driven peer speaking frames on a net.Conn ----

// rawHello is the valid HELLO a hand-driven peer announces.
func rawHello() frame.Hello {
	return frame.Hello{Proto: frame.Proto, Node: "raw", Codecs: frame.CodecIDs{0}, MaxFrame: 64 << 10, Window: 256 << 10, MaxStreams: 256}
}

// appendFrame appends one encoded frame to dst.
func appendFrame(dst []byte, t frame.Type, fl frame.Flags, id uint32, payload []byte) []byte {
	dst = frame.Header{Length: uint32(len(payload)), Type: t, Flags: fl, StreamID: id}.Append(dst)
	return append(dst, payload...)
}

// dataFrame is a DATA frame carrying msg; with start it has the identity preamble, with end
// the trailer with crc.
func dataFrame(dst []byte, id uint32, start, end bool, msg []byte, crc uint32) []byte {
	var p []byte
	var fl frame.Flags
	if start {
		fl |= frame.FlagStart
		p = frame.Preamble{}.Append(p)
	}
	p = append(p, msg...)
	if end {
		fl |= frame.FlagEnd
		p = frame.AppendTrailer(p, crc)
	}
	return appendFrame(dst, frame.TypeData, fl, id, p)
}

// wholeMessage is a single START|END DATA frame with the correct checksum.
func wholeMessage(dst []byte, id uint32, msg []byte) []byte {
	return dataFrame(dst, id, true, true, msg, crc32.Checksum(msg, castagnoli))
}

func helloFrame(h frame.Hello) []byte {
	return appendFrame(nil, frame.TypeHello, 0, 0, frame.AppendHello(nil, h))
}

// compactIn remembers, per raw connection, the stream id of the last compact header
// read from it (the base of the next one's delta).
var compactIn sync.Map // io.Reader -> uint32

// byteReader reads r one byte at a time, so nothing past the header is consumed.
type byteReader struct{ r io.Reader }

func (b byteReader) ReadByte() (byte, error) {
	var c [1]byte
	_, err := io.ReadFull(b.r, c[:])
	return c[0], err
}

// readFrame reads one frame, full or compact header, of any size up to frame.MaxPayload.
func readFrame(r io.Reader) (frame.Header, []byte, error) {
	var hb [frame.HeaderLen]byte
	if _, err := io.ReadFull(r, hb[:1]); err != nil {
		return frame.Header{}, nil, err
	}
	var h frame.Header
	var err error
	if frame.IsCompact(hb[0]) {
		prev, _ := compactIn.Load(r)
		prevID, _ := prev.(uint32)
		h, _, err = frame.ReadCompact(hb[0], byteReader{r}, prevID, frame.MaxPayload)
		if err == nil {
			compactIn.Store(r, h.StreamID)
		}
	} else {
		if _, err := io.ReadFull(r, hb[1:]); err != nil {
			return frame.Header{}, nil, err
		}
		h, err = frame.ParseHeader(hb[:], frame.MaxPayload)
	}
	if err != nil {
		return h, nil, err
	}
	p := make([]byte, h.Length)
	_, err = io.ReadFull(r, p)
	return h, p, err
}

// rawServerSession completes the handshake by hand on raw (announcing hello) against a
// ServerSession on conn, the other end of the same connection.
func rawServerSession(t testing.TB, raw, conn net.Conn, scfg *Config, hello frame.Hello) (*Session, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	type res struct {
		s   *Session
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := ServerSession(ctx, conn, scfg, nil)
		ch <- res{s, err}
	}()
	t.Cleanup(func() { _ = raw.Close() })
	_ = raw.SetDeadline(time.Now().Add(5 * time.Second))
	werr := make(chan error, 1)
	go func() { _, err := raw.Write(helloFrame(hello)); werr <- err }()
	h, _, err := readFrame(raw)
	if err != nil {
		return nil, err
	}
	if h.Type != frame.TypeHello {
		return nil, errors.New("first frame from the session is not HELLO")
	}
	if err := <-werr; err != nil {
		return nil, err
	}
	_ = raw.SetDeadline(time.Time{})
	r := <-ch
	if r.err == nil {
		t.Cleanup(func() { _ = r.s.Close() })
	}
	return r.s, r.err
}

// rawTCPServerSession is rawServerSession over TCP loopback with the default raw HELLO.
func rawTCPServerSession(t *testing.T, scfg *Config) (net.Conn, *Session) {
	t.Helper()
	raw, conn := tcpPair(t)
	s, err := rawServerSession(t, raw, conn, scfg, rawHello())
	require.NoError(t, err)
	return raw, s
}

// expectGoAway reads frames from raw until a GOAWAY and returns its code and reason.
func expectGoAway(t *testing.T, raw net.Conn) (frame.Code, string) {
	t.Helper()
	_ = raw.SetReadDeadline(time.Now().Add(3 * time.Second))
	defer raw.SetReadDeadline(time.Time{})
	for {
		h, p, err := readFrame(raw)
		require.NoError(t, err, "connection ended without GOAWAY")
		if h.Type == frame.TypeGoAway {
			_, code, reason, err := frame.ParseGoAway(p)
			require.NoError(t, err)
			return code, reason
		}
	}
}

// waitClosed waits for s to close and returns why.
func waitClosed(t *testing.T, s *Session) error {
	t.Helper()
	select {
	case <-s.Done():
		return s.Err()
	case <-time.After(3 * time.Second):
		t.Fatal("session still open")
		return nil
	}
}

// bufferedForTest is how many received message bytes st holds that Read has not taken.
func bufferedForTest(st *Stream) int {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := 0
	for _, c := range st.chunks {
		n += len(c.data)
	}
	return n
}

// ---- flow control ----

// A receiver holds at most StreamWindow bytes of a stream nobody reads: the writer blocks.
func TestStreamWindowBoundsReceiverBuffer(t *testing.T) {
	testConnTypes(t, func(t *testing.T, pair connPair) {
		const window = 64 << 10
		c, s := sessionPair(t, pair, nil, &Config{StreamWindow: window})
		st, err := c.OpenStream(context.Background())
		require.NoError(t, err)
		wrote := make(chan error, 1)
		go func() {
			_, err := st.Write(make([]byte, 10*window))
			wrote <- err
		}()
		sst, err := s.AcceptStream(context.Background())
		require.NoError(t, err)
		select {
		case err := <-wrote:
			t.Fatalf("Write of 10 windows returned (%v) though nobody reads", err)
		case <-time.After(200 * time.Millisecond):
		}
		n := bufferedForTest(sst)
		require.LessOrEqual(t, n, window, "receiver buffers more than its window")
		require.GreaterOrEqual(t, n, window/2, "the sender should have used the window")
		sst.mu.Lock()
		require.GreaterOrEqual(t, sst.rwindow, int64(0))
		sst.mu.Unlock()
		// Reading releases credit and the writer makes progress again.
		_, err = io.ReadFull(sst, make([]byte, n))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return bufferedForTest(sst) > 0 }, 2*time.Second, 5*time.Millisecond)
		require.LessOrEqual(t, bufferedForTest(sst), window)
		// Closing the stream unblocks the writer with an error.
		require.NoError(t, st.Close())
		select {
		case err := <-wrote:
			require.Error(t, err)
		case <-time.After(2 * time.Second):
			t.Fatal("Write still blocked after Close")
		}
	})
}

// A peer that ignores the window is cut off with FLOW_CONTROL before it can make the
// receiver buffer more than the window.
func TestFlowControlViolationClosesSession(t *testing.T) {
	const window = 64 << 10
	raw, s := rawTCPServerSession(t, &Config{StreamWindow: window, KeepaliveInterval: 0})
	var b []byte
	b = dataFrame(b, 1, true, false, make([]byte, 60000), 0)
	b = dataFrame(b, 1, false, false, make([]byte, 6000), 0) // 66002 > 65536
	_, err := raw.Write(b)
	require.NoError(t, err)
	code, _ := expectGoAway(t, raw)
	require.Equal(t, frame.CodeFlowControl, code)
	require.ErrorIs(t, waitClosed(t, s), errFlowControl)
}

// ---- stream limits ----

// OpenStream refuses a stream beyond the peer's max_streams with a retryable ErrStreamLimit.
func TestMaxStreamsOpenStreamLimit(t *testing.T) {
	c, s := sessionPair(t, tcpPair, nil, &Config{MaxStreams: 2})
	echoServer(t, s)
	a, err := c.OpenStream(context.Background())
	require.NoError(t, err)
	_, err = c.OpenStream(context.Background())
	require.NoError(t, err)
	_, err = c.OpenStream(context.Background())
	require.ErrorIs(t, err, ErrStreamLimit)
	var r interface{ Retryable() bool }
	require.True(t, errors.As(err, &r) && r.Retryable())
	require.NoError(t, a.Close())
	got, err := exchange(context.Background(), c, []byte("x"))
	require.NoError(t, err)
	require.Equal(t, []byte("re:x"), got)
}

// A peer that opens more streams than announced gets RST_STREAM(REFUSED) for the extra
// one; the session and the streams within the limit go on.
func TestMaxStreamsRefusedByPeer(t *testing.T) {
	raw, s := rawTCPServerSession(t, &Config{MaxStreams: 2, KeepaliveInterval: 0})
	var b []byte
	for _, id := range []uint32{1, 3, 5} {
		b = dataFrame(b, id, true, false, []byte("<req/>"), 0)
	}
	_, err := raw.Write(b)
	require.NoError(t, err)
	_ = raw.SetReadDeadline(time.Now().Add(3 * time.Second))
	for {
		h, p, err := readFrame(raw)
		require.NoError(t, err)
		if h.Type != frame.TypeRSTStream {
			continue
		}
		code, _, err := frame.ParseRST(p)
		require.NoError(t, err)
		require.Equal(t, uint32(5), h.StreamID)
		require.Equal(t, frame.CodeRefused, code)
		require.True(t, (&StreamError{Code: code}).Retryable())
		break
	}
	require.NoError(t, s.Err())
	require.Equal(t, 2, s.NumStreams())
	// Stream 1 still works: finish its request and see it arrive.
	st, err := s.AcceptStream(context.Background())
	require.NoError(t, err)
	require.Equal(t, uint32(1), st.ID())
	msg := []byte("<req/><more/>")
	_, err = raw.Write(dataFrame(nil, 1, false, true, []byte("<more/>"), crc32.Checksum(msg, castagnoli)))
	require.NoError(t, err)
	got, err := io.ReadAll(st)
	require.NoError(t, err)
	require.Equal(t, msg, got)
}

// ---- malformed input kills the session ----

func TestFrameTooLargeKillsSession(t *testing.T) {
	raw, s := rawTCPServerSession(t, &Config{MaxFrame: 16 << 10, StreamWindow: 64 << 10, KeepaliveInterval: 0})
	hdr := frame.Header{Length: 16<<10 + 1, Type: frame.TypeData, Flags: frame.FlagStart, StreamID: 1}.Append(nil)
	_, err := raw.Write(hdr)
	require.NoError(t, err)
	code, reason := expectGoAway(t, raw)
	require.Equal(t, frame.CodeProtocol, code)
	require.Contains(t, reason, "too large")
	require.ErrorIs(t, waitClosed(t, s), frame.ErrFrameTooLarge)
}

func TestProtocolViolationsCloseSession(t *testing.T) {
	msg := []byte("<a/>")
	sum := crc32.Checksum(msg, castagnoli)
	cases := []struct {
		name   string
		frames []byte
		want   string
	}{
		{"data without start", dataFrame(nil, 1, false, false, msg, 0), "without START"},
		{"second start", dataFrame(dataFrame(nil, 1, true, false, msg, 0), 1, true, false, msg, 0), "second START"},
		{"data after end", dataFrame(wholeMessage(nil, 1, msg), 1, false, true, nil, sum), "DATA after END"},
		{"data on stream 0", dataFrame(nil, 0, true, true, msg, sum), "stream 0"},
		{"hello after handshake", helloFrame(rawHello()), "HELLO after handshake"},
		{"compact header to stream 0", []byte{0xe0, 4, 0}, "compact header stream id 0"},
		{"bad window update", appendFrame(wholeMessage(nil, 1, msg), frame.TypeWindowUpdate, 0, 1, []byte{0, 0, 0, 0}), "window increment"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw, s := rawTCPServerSession(t, &Config{KeepaliveInterval: 0})
			_, err := raw.Write(tc.frames)
			require.NoError(t, err)
			code, reason := expectGoAway(t, raw)
			require.Equal(t, frame.CodeProtocol, code)
			require.Contains(t, reason, tc.want)
			err = waitClosed(t, s)
			require.ErrorIs(t, err, frame.ErrBadPayload)
			require.ErrorContains(t, err, "protocol error")
		})
	}
}

// A peer may send small DATA frames with compact headers (stream ids as deltas from the
// previous compact header) mixed with full ones; the receiver reads both.
func TestCompactHeadersReceived(t *testing.T) {
	raw, s := rawTCPServerSession(t, &Config{KeepaliveInterval: 0})
	msgs := map[uint32][]byte{1: []byte("<a>one</a>"), 3: []byte("<b>three</b>"), 5: []byte("<c>five</c>")}
	compact := func(dst []byte, id, prev uint32, msg []byte) []byte {
		full := wholeMessage(nil, id, msg)
		h, err := frame.ParseHeader(full, 0)
		require.NoError(t, err)
		return append(h.AppendCompact(dst, prev), full[frame.HeaderLen:]...)
	}
	var b []byte
	b = compact(b, 1, 0, msgs[1])
	b = wholeMessage(b, 3, msgs[3]) // a full header does not move the compact base
	b = compact(b, 5, 1, msgs[5])
	_, err := raw.Write(b)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range len(msgs) {
		st, err := s.AcceptStream(ctx)
		require.NoError(t, err)
		got, err := io.ReadAll(st)
		require.NoError(t, err)
		require.Equal(t, msgs[st.ID()], got, "stream %d", st.ID())
	}
}

// ---- no leaks ----

func TestStreamFloodLeavesNoStreams(t *testing.T) {
	c, s := sessionPair(t, tcpPair, nil, nil)
	echoServer(t, s)
	const total, workers = 10000, 32
	var next atomic.Int64
	errs := make(chan error, workers)
	for range workers {
		go func() {
			for {
				i := next.Add(1)
				if i > total {
					errs <- nil
					return
				}
				msg := []byte{byte(i), byte(i >> 8)}
				got, err := exchange(context.Background(), c, msg)
				if err == nil && !bytes.Equal(got, append([]byte("re:"), msg...)) {
					err = errors.New("wrong response")
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range workers {
		select {
		case err := <-errs:
			require.NoError(t, err)
		case <-time.After(20 * time.Second):
			t.Fatal("flood did not complete")
		}
	}
	require.Eventually(t, func() bool { return c.NumStreams() == 0 && s.NumStreams() == 0 }, 2*time.Second, 5*time.Millisecond)
	for _, x := range []*Session{c, s} {
		x.mu.Lock()
		require.Empty(t, x.streams)
		require.Zero(t, x.numOpen)
		require.Zero(t, len(x.ring)-x.ringHead)
		x.mu.Unlock()
		require.Empty(t, x.acceptCh)
	}
	require.NoError(t, c.Err())
	require.NoError(t, s.Err())
}

// TestPingFloodClosesSession: a peer that sends PINGs without reading our answers used to
// grow the control queue without limit (one 16 KiB buffer per ACK). The queue is now bounded
// and the session closes when a peer exceeds it; control frames use right-sized buffers.
func TestPingFloodClosesSession(t *testing.T) {
	// In a synctest bubble: net.Pipe blocks durably, so synctest.Wait returns exactly when
	// the session has handled everything it was sent, with no sleep to guess that.
	synctest.Test(t, func(t *testing.T) {
		raw, conn := net.Pipe()
		s, err := rawServerSession(t, raw, conn, &Config{KeepaliveInterval: 0}, rawHello())
		require.NoError(t, err)
		// One PING: the session's writer answers it and blocks on the pipe nobody reads.
		_, err = raw.Write(appendFrame(nil, frame.TypePing, 0, 0, frame.AppendPing(nil, 1)))
		require.NoError(t, err)
		synctest.Wait() // the writer is blocked on the pipe nobody reads
		var flood []byte
		for i := range 5000 {
			flood = appendFrame(flood, frame.TypePing, 0, 0, frame.AppendPing(nil, uint64(i)))
		}
		_ = raw.SetWriteDeadline(time.Now().Add(2 * time.Second))
		_, _ = raw.Write(flood) // may time out if the session applies back-pressure: fine
		queuedNow := func() (n, pinned int) {
			s.mu.Lock()
			defer s.mu.Unlock()
			for _, q := range s.ctrlQ {
				pinned += cap(q.payload)
			}
			return len(s.ctrlQ), pinned
		}
		// Write returns once the session has read the bytes, maybe before it handled them;
		// Wait returns once it has.
		synctest.Wait()
		queued, pinned := queuedNow()
		t.Logf("control frames queued: %d, bytes pinned: %d", queued, pinned)
		if s.Err() == nil {
			require.LessOrEqual(t, queued, 1024, "control queue grows without bound under a PING flood")
		}
	})
}

// TestBulkStreamsLeaveRoom: bulk streams (one-way deliveries) fill a session only up to
// BulkLimit of the peer's max_streams; the rest stays open to ordinary exchanges.
func TestBulkStreamsLeaveRoom(t *testing.T) {
	for _, tc := range []struct{ max, bulk uint32 }{{1024, 992}, {64, 62}, {16, 15}, {8, 7}, {2, 1}, {1, 1}, {0, 1}} {
		require.Equal(t, tc.bulk, BulkLimit(tc.max), "max_streams %d", tc.max)
	}
	c, s := sessionPair(t, tcpPair, nil, &Config{MaxStreams: 16})
	echoServer(t, s)
	ctx := context.Background()
	var bulk []*Stream
	for range BulkLimit(16) {
		st, err := c.OpenBulkStream(ctx)
		require.NoError(t, err)
		require.True(t, st.bulk, "opened as bulk")
		bulk = append(bulk, st)
	}
	_, err := c.OpenBulkStream(ctx)
	require.ErrorIs(t, err, ErrStreamLimit, "no bulk stream beyond the bulk limit")
	var ordinary []*Stream
	for range 16 - BulkLimit(16) {
		st, err := c.OpenStream(ctx)
		require.NoError(t, err, "ordinary exchanges keep their room")
		ordinary = append(ordinary, st)
	}
	_, err = c.OpenStream(ctx)
	require.ErrorIs(t, err, ErrStreamLimit)
	// The limit counts every stream: with the ordinary ones gone and one bulk stream
	// ended, one bulk stream opens again.
	for _, st := range append(ordinary, bulk[0]) {
		require.NoError(t, st.Close())
	}
	require.Eventually(t, func() bool {
		st, err := c.OpenBulkStream(ctx)
		if err == nil {
			_ = st.Close()
		}
		return err == nil
	}, 10*time.Second, time.Millisecond, "a freed stream takes a bulk stream again")
}
