package tunnel

import (
	"bytes"
	"context"
	"hash/crc32"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

// Slow links with big messages (issue 17): a healthy tunnel must not be declared dead
// because one frame or one queue takes longer to cross the link than a timeout. Both
// tests run in synctest bubbles over net.Pipe, so the link's pace is exact fake time.

// TestKeepaliveCountsBytesNotFrames: a 60 KB frame dribbles in over 30 s (2 KB/s, GPRS
// pace) while the peer answers no PING. The session used to see the peer as silent
// because no *frame* had completed for KeepaliveTimeout; every byte now counts as life.
// When the bytes stop, the keepalive timeout still fires.
func TestKeepaliveCountsBytesNotFrames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		raw, conn := net.Pipe()
		const timeout = 3 * time.Second
		s, err := rawServerSession(t, raw, conn, &Config{KeepaliveInterval: time.Second, KeepaliveTimeout: timeout}, rawHello())
		require.NoError(t, err)
		go func() { _, _ = io.Copy(io.Discard, raw) }() // reads our PINGs, never answers

		msg := bytes.Repeat([]byte("x"), 60<<10)
		f := wholeMessage(nil, 1, msg)
		const piece = 1 << 10
		for len(f) > 0 {
			n := min(piece, len(f))
			_, err := raw.Write(f[:n])
			require.NoError(t, err, "the session closed while bytes were still arriving")
			f = f[n:]
			time.Sleep(500 * time.Millisecond)
		}
		st, err := s.AcceptStream(context.Background())
		require.NoError(t, err)
		got, err := io.ReadAll(st)
		require.NoError(t, err)
		require.Equal(t, msg, got)

		// Now the peer is silent: the session closes within the timeout and a tick or two.
		silentFrom := time.Now()
		<-s.Done()
		require.ErrorIs(t, s.Err(), ErrKeepaliveTimeout)
		require.LessOrEqual(t, time.Since(silentFrom), timeout+2*time.Second)
		_ = raw.Close()
	})
}

// TestKeepaliveCountsPeerAcks: on a slow link the answer to our PING waits behind the
// bulk data queued ahead of it, longer than the keepalive timeout, and the peer sends
// nothing else. While the peer's transport acknowledges our data (Config.PeerAcked: its
// kernel's TCP_INFO), the session stays up; once the acknowledgements stop, it closes
// within the timeout. Acknowledgements of no more than our PINGs do not count.
func TestKeepaliveCountsPeerAcks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		raw, conn := net.Pipe()
		const timeout = 3 * time.Second
		var acked atomic.Uint64
		var taking atomic.Bool // the peer takes our bulk data: its acknowledgements grow
		taking.Store(true)
		cfg := &Config{KeepaliveInterval: time.Second, KeepaliveTimeout: timeout,
			PeerAcked: func(c net.Conn) (uint64, bool) {
				if c != conn {
					return 0, false
				}
				if taking.Load() {
					return acked.Add(4 << 10), true
				}
				return acked.Add(40), true // only a PING's worth
			}}
		s, err := rawServerSession(t, raw, conn, cfg, rawHello())
		require.NoError(t, err)
		go func() { _, _ = io.Copy(io.Discard, raw) }() // reads our PINGs, never answers

		time.Sleep(10 * timeout)
		synctest.Wait()
		require.NoError(t, s.Err(), "the peer's acknowledgements show it alive")

		taking.Store(false)
		stopped := time.Now()
		<-s.Done()
		require.ErrorIs(t, s.Err(), ErrKeepaliveTimeout)
		require.LessOrEqual(t, time.Since(stopped), timeout+2*time.Second)
		_ = raw.Close()
	})
}

// TestWriteDeadlineMeasuresProgress: a 1 MiB response queued at once to a peer that reads
// 8 KB every 100 ms (80 KB/s: 13 s in all) with WriteTimeout 2 s. A deadline over a whole
// flush failed this healthy tunnel after 2 s; the deadline now measures progress (each
// 64 KiB) and the response arrives whole. A peer that stops reading still fails the write
// after WriteTimeout.
func TestWriteDeadlineMeasuresProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		raw, conn := net.Pipe()
		hello := rawHello()
		hello.Window = 8 << 20 // no flow control in the way: the whole response is queued
		const writeTimeout = 2 * time.Second
		s, err := rawServerSession(t, raw, conn, &Config{KeepaliveInterval: 0, WriteTimeout: writeTimeout}, hello)
		require.NoError(t, err)
		_, err = raw.Write(wholeMessage(nil, 1, []byte("<get/>")))
		require.NoError(t, err)
		st, err := s.AcceptStream(context.Background())
		require.NoError(t, err)
		_, err = io.ReadAll(st)
		require.NoError(t, err)

		resp := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
		done := make(chan error, 1)
		go func() {
			_, err := st.Write(resp)
			if err == nil {
				err = st.CloseWrite()
			}
			done <- err
		}()

		var got []byte
		slow := &pacedReader{r: raw, piece: 8 << 10, every: 100 * time.Millisecond}
		begin := time.Now()
		for {
			h, p, err := readFrame(slow)
			require.NoError(t, err, "after %v", time.Since(begin))
			if h.StreamID != 1 {
				continue
			}
			if h.Flags.Has(frame.FlagStart) {
				_, p, err = frame.ParsePreamble(p)
				require.NoError(t, err)
			}
			if h.Flags.Has(frame.FlagEnd) {
				data, crc, err := frame.ParseTrailer(p)
				require.NoError(t, err)
				got = append(got, data...)
				require.Equal(t, crc32.Checksum(resp, castagnoli), crc)
				break
			}
			got = append(got, p...)
		}
		require.NoError(t, <-done)
		require.Equal(t, resp, got)
		require.Greater(t, time.Since(begin), 5*writeTimeout, "the response took many write timeouts to cross")
		require.NoError(t, s.Err())

		// A peer that stops reading: the next write waits WriteTimeout, then the session fails.
		st2Done := make(chan struct{})
		go func() {
			defer close(st2Done)
			_, _ = raw.Write(wholeMessage(nil, 3, []byte("<get/>")))
		}()
		st2, err := s.AcceptStream(context.Background())
		require.NoError(t, err)
		_, _ = io.ReadAll(st2)
		stalled := time.Now()
		go func() { _, _ = st2.Write(resp); _ = st2.CloseWrite() }()
		<-s.Done()
		require.ErrorContains(t, s.Err(), "write")
		require.LessOrEqual(t, time.Since(stalled), writeTimeout+time.Second)
		<-st2Done
		_ = raw.Close()
	})
}

// pacedReader reads at most piece bytes every interval: a slow link's receiver.
type pacedReader struct {
	r     io.Reader
	piece int
	every time.Duration
	left  int
}

func (p *pacedReader) Read(b []byte) (int, error) {
	if p.left == 0 {
		time.Sleep(p.every)
		p.left = p.piece
	}
	n, err := p.r.Read(b[:min(len(b), p.left)])
	p.left -= n
	return n, err
}
