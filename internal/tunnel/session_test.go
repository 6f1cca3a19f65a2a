package tunnel

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// serveEach runs serve on a goroutine of its own for each stream s accepts, until s ends.
func serveEach(s *Session, serve func(st *Stream)) {
	go func() {
		for {
			st, err := s.AcceptStream(context.Background())
			if err != nil {
				return
			}
			go serve(st)
		}
	}()
}

// echoServer answers each stream with its request prefixed by "re:".
func echoServer(t *testing.T, s *Session) {
	t.Helper()
	serveEach(s, func(st *Stream) { echoHandler(context.Background(), st) })
}

func exchange(ctx context.Context, s *Session, msg []byte) ([]byte, error) {
	st, err := s.OpenStream(ctx)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	if _, err := st.Write(msg); err != nil {
		return nil, err
	}
	if err := st.CloseWrite(); err != nil {
		return nil, err
	}
	return io.ReadAll(st)
}

func TestExchangeSizes(t *testing.T) {
	testConnTypes(t, func(t *testing.T, pair connPair) {
		c, s := sessionPair(t, pair, nil, nil)
		echoServer(t, s)
		for _, n := range []int{0, 1, 1000, 16 << 10, 16<<10 + 1, 300 << 10, 3 << 20} {
			msg := make([]byte, n)
			for i := range msg {
				msg[i] = byte(i * 7)
			}
			got, err := exchange(context.Background(), c, msg)
			require.NoError(t, err, "size %d", n)
			require.Equal(t, append([]byte("re:"), msg...), got, "size %d", n)
		}
		require.Eventually(t, func() bool { return c.NumStreams() == 0 && s.NumStreams() == 0 }, time.Second, 5*time.Millisecond)
	})
}

func TestConcurrentStreamsInterleave(t *testing.T) {
	testConnTypes(t, func(t *testing.T, pair connPair) {
		c, s := sessionPair(t, pair, nil, nil)
		echoServer(t, s)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for i := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				msg := bytes.Repeat([]byte(fmt.Sprintf("<m id=%d/>", i)), 1+rand.IntN(20000))
				got, err := exchange(context.Background(), c, msg)
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
	})
}

// A small exchange must not wait for a large one on the same connection to finish.
func TestSmallNotBlockedByLarge(t *testing.T) {
	c, s := sessionPair(t, tcpPair, nil, nil)
	release := make(chan struct{})
	held := make(chan struct{}) // the big exchange has reached the server and is held there
	go func() {
		for {
			st, err := s.AcceptStream(context.Background())
			if err != nil {
				return
			}
			go func() {
				defer st.Close()
				b, _ := io.ReadAll(st)
				if len(b) > 1000 {
					close(held)
					<-release // the big one is held at the server
				}
				_, _ = st.Write(b[:10])
				_ = st.CloseWrite()
			}()
		}
	}()
	big, err := c.OpenStream(context.Background())
	require.NoError(t, err)
	go func() {
		_, _ = big.Write(make([]byte, 8<<20)) // more than a window: stalls on credit
		_ = big.CloseWrite()
	}()
	<-held // an event, not a sleep: the big exchange is in progress when the small one starts
	got, err := exchange(context.Background(), c, []byte("small message"))
	require.NoError(t, err)
	require.Equal(t, []byte("small mess"), got)
	close(release)
	big.Close()
}

func TestChecksumMismatchIsNeverDelivered(t *testing.T) {
	c, s := sessionPair(t, tcpPair, nil, nil)
	st, err := c.OpenStream(context.Background())
	require.NoError(t, err)
	// Corrupt the sender's running CRC: the trailer no longer matches the bytes.
	_, err = st.Write([]byte("hello"))
	require.NoError(t, err)
	st.mu.Lock()
	st.scrc ^= 0xdeadbeef
	st.mu.Unlock()
	require.NoError(t, st.CloseWrite())

	sst, err := s.AcceptStream(context.Background())
	require.NoError(t, err)
	b, err := io.ReadAll(sst)
	var ce *ChecksumError
	require.ErrorAs(t, err, &ce)
	require.Empty(t, b, "no byte of a single-frame corrupted message may be released")
	// The sender learns of it through RST_STREAM(CHECKSUM).
	_, err = io.ReadAll(st)
	var se *StreamError
	require.ErrorAs(t, err, &se)
	require.True(t, se.Remote)
}

func TestReadDeadline(t *testing.T) {
	c, s := sessionPair(t, tcpPair, nil, nil)
	_ = s
	st, err := c.OpenStream(context.Background())
	require.NoError(t, err)
	require.NoError(t, st.CloseWrite())
	require.NoError(t, st.SetReadDeadline(time.Now().Add(30*time.Millisecond)))
	_, err = st.Read(make([]byte, 10))
	require.ErrorIs(t, err, ErrTimeout)
	var ne interface{ Timeout() bool }
	require.True(t, errors.As(err, &ne) && ne.Timeout())
}

func TestSessionCloseFailsStreams(t *testing.T) {
	c, s := sessionPair(t, tcpPair, nil, nil)
	st, err := c.OpenStream(context.Background())
	require.NoError(t, err)
	require.NoError(t, st.CloseWrite())
	_, err = s.AcceptStream(context.Background())
	require.NoError(t, err)
	require.NoError(t, s.Close())
	_, err = io.ReadAll(st)
	require.ErrorIs(t, err, ErrSessionClosed)
	<-c.Done()
	_, err = c.OpenStream(context.Background())
	require.ErrorIs(t, err, ErrSessionClosed)
}

func TestGoAwayRefusesNewStreams(t *testing.T) {
	c, s := sessionPair(t, tcpPair, nil, nil)
	echoServer(t, s)
	_, err := exchange(context.Background(), c, []byte("before"))
	require.NoError(t, err)
	s.GoAway(0, "restart")
	require.Eventually(t, c.Draining, time.Second, time.Millisecond)
	_, err = c.OpenStream(context.Background())
	require.ErrorIs(t, err, ErrGoAway)
	var r interface{ Retryable() bool }
	require.True(t, errors.As(err, &r) && r.Retryable())
}

func TestKeepaliveMeasuresRTTAndDetectsSilence(t *testing.T) {
	cfg := &Config{KeepaliveInterval: 20 * time.Millisecond, KeepaliveTimeout: 60 * time.Millisecond}
	c, _ := sessionPair(t, tcpPair, cfg, nil)
	require.Eventually(t, func() bool { return c.RTT() > 0 }, time.Second, 5*time.Millisecond)

	// A peer that completes the handshake and then never reads or answers.
	cc, sc := tcpPair(t)
	go func() {
		ss, err := ServerSession(context.Background(), sc, &Config{KeepaliveInterval: 0}, nil)
		if err == nil {
			ss.recvLoopStopForTest()
		}
	}()
	cs, err := ClientSession(context.Background(), cc, cfg, nil, "silent")
	require.NoError(t, err)
	select {
	case <-cs.Done():
		require.ErrorIs(t, cs.Err(), ErrKeepaliveTimeout)
	case <-time.After(3 * time.Second):
		t.Fatal("keepalive did not detect a silent peer")
	}
}

func TestLargeTransferIntegrity(t *testing.T) {
	c, s := sessionPair(t, tcpPair, nil, nil)
	go func() {
		st, err := s.AcceptStream(context.Background())
		if err != nil {
			return
		}
		defer st.Close()
		h := sha256.New()
		_, _ = io.Copy(h, st)
		_, _ = st.Write(h.Sum(nil))
		_ = st.CloseWrite()
	}()
	msg := make([]byte, 20<<20)
	for i := range msg {
		msg[i] = byte(rand.IntN(256))
	}
	want := sha256.Sum256(msg)
	st, err := c.OpenStream(context.Background())
	require.NoError(t, err)
	go func() { _, _ = st.Write(msg); _ = st.CloseWrite() }()
	got, err := io.ReadAll(st)
	require.NoError(t, err)
	require.Equal(t, want[:], got)
}

// TestCloseGracefullyDeliversToSlowReader pins the contract of CloseGracefully: a peer
// that reads slowly still gets the whole message. The bug behind it (closing with the
// peer's window updates unread sends RST, and the RST drops bytes the peer has not read)
// needs unread input at the instant of close, a window this in-process test rarely hits;
// e2e TestOriginDrainDeliversFinishedResponses reproduced it about one run in three.
func TestCloseGracefullyDeliversToSlowReader(t *testing.T) {
	// The client pings every millisecond, so the closing side always has input it has
	// not read yet: the condition under which a plain close sends RST.
	c, s := sessionPair(t, tcpPair, &Config{KeepaliveInterval: time.Millisecond, KeepaliveTimeout: time.Second}, nil)
	msg := make([]byte, 4<<20)
	for i := range msg {
		msg[i] = byte(i * 31)
	}
	go func() {
		st, err := s.AcceptStream(context.Background())
		if err != nil {
			return
		}
		_, _ = io.ReadAll(st)
		_, _ = st.Write(msg)
		_ = st.CloseWrite()
		_ = s.CloseGracefully(context.Background())
	}()
	st, err := c.OpenStream(context.Background())
	require.NoError(t, err)
	require.NoError(t, st.CloseWrite())
	var got []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := st.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		time.Sleep(time.Millisecond) // a reader slower than the writer
	}
	require.Equal(t, msg, got)
}
