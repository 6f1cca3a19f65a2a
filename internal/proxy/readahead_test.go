package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/httpwire"
)

// pacedStream is a tunnel stream that takes every write only after delay (a slow link);
// it records what it got, flushes as "|", and fails writes once failAfter bytes are in
// (0: never).
type pacedStream struct {
	Stream
	delay     time.Duration
	failAfter int

	mu  sync.Mutex
	out bytes.Buffer
}

var errPaced = errors.New("paced stream failed")

func (s *pacedStream) Write(p []byte) (int, error) {
	time.Sleep(s.delay)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failAfter > 0 && s.out.Len() >= s.failAfter {
		return 0, errPaced
	}
	return s.out.Write(p)
}

func (s *pacedStream) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.out.WriteByte('|')
	return nil
}

func (s *pacedStream) got() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

func TestReadAheadQueuesBehindASlowTunnel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &pacedStream{delay: 2 * slowWrite}
		tokens := make(chan struct{}, 64)
		ra := &readAhead{Stream: st, tokens: tokens}
		var want strings.Builder
		start := time.Now()
		for i := range 20 {
			part := fmt.Sprintf("<part n=%q/>", fmt.Sprint(i))
			want.WriteString(part)
			_, err := ra.Write([]byte(part))
			require.NoError(t, err)
			if i == 9 {
				require.NoError(t, ra.Flush())
				want.WriteString("|")
			}
		}
		require.Less(t, time.Since(start), 10*slowWrite, "after the first slow write the rest is queued, not waited for")
		require.NoError(t, ra.finish())
		require.Equal(t, want.String(), st.got(), "in order, the flush in its place")
		require.Empty(t, tokens, "every chunk's token given back")

		fast := &pacedStream{}
		ra = &readAhead{Stream: fast, tokens: tokens}
		_, err := ra.Write([]byte("<a/>"))
		require.NoError(t, err)
		require.False(t, ra.queued.Load(), "a tunnel that keeps up is written directly")
		require.NoError(t, ra.finish())
	})
}

func TestReadAheadBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &pacedStream{delay: 2 * slowWrite}
		tokens := make(chan struct{}, 2) // two chunks for the whole origin
		ra := &readAhead{Stream: st, tokens: tokens}
		_, err := ra.Write([]byte("head")) // slow: switches to the queue
		require.NoError(t, err)
		start := time.Now()
		chunk := bytes.Repeat([]byte("c"), aheadChunk) // one token each
		for range 6 {
			_, err := ra.Write(chunk)
			require.NoError(t, err)
			require.LessOrEqual(t, len(tokens), 2)
		}
		require.Greater(t, time.Since(start), 3*slowWrite, "past the budget a write waits for the tunnel again")
		require.NoError(t, ra.finish())
		require.Equal(t, "head"+strings.Repeat("c", 6*aheadChunk), st.got())
		require.Empty(t, tokens)
	})
}

func TestReadAheadStreamFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &pacedStream{delay: 2 * slowWrite, failAfter: 8}
		tokens := make(chan struct{}, 64)
		ra := &readAhead{Stream: st, tokens: tokens}
		_, err := ra.Write([]byte("12345678")) // slow, then queued
		require.NoError(t, err)
		var werr error
		for i := 0; i < 100 && werr == nil; i++ {
			_, werr = ra.Write([]byte("more"))
			time.Sleep(slowWrite / 4)
		}
		require.ErrorIs(t, werr, errPaced, "the stream's failure reaches the writer")
		require.ErrorIs(t, ra.finish(), errPaced)
		require.Empty(t, tokens, "the dropped chunks' tokens given back")
	})
}

// TestOriginReadsAheadOfASlowTunnel: the upstream's response is read as fast as the
// upstream sends it, not as fast as the tunnel drains, so a server that closes its idle
// connection after answering (or just needs its thread back) never waits on the link. The
// upstream here writes through a pipe with no buffer at all: each of its writes returns
// only when the origin has read it.
func TestOriginReadsAheadOfASlowTunnel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o, err := NewOrigin(OriginConfig{}, nil, nil)
		require.NoError(t, err)
		body := strings.Repeat("<item>over a slow link</item>", 20000) // 580 KB: 18 chunks
		cc, sc := net.Pipe()
		defer cc.Close()
		defer sc.Close()
		upDone := make(chan int, 1)
		st := &pacedStream{delay: 3 * slowWrite}
		go func() {
			// In small writes, as TCP delivers them: the origin's reads return a segment.
			_, _ = fmt.Fprintf(sc, "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: %d\r\n\r\n", len(body))
			for off := 0; off < len(body); off += 1448 {
				_, _ = io.WriteString(sc, body[off:min(off+1448, len(body))])
			}
			upDone <- len(st.got()) // what the tunnel had when the upstream was done
		}()
		uc := &upstreamConn{conn: cc, br: bufio.NewReaderSize(cc, 16<<10)}
		resp, err := httpwire.ReadResponse(uc.br, "POST", httpwire.Limits{})
		require.NoError(t, err)
		ra := &readAhead{Stream: st, tokens: o.aheadTokens, gauge: o.m.readAhead}
		_, err = o.sendResponse(ra, uc, resp)
		require.NoError(t, err)
		tunnelHad := <-upDone
		require.NoError(t, ra.finish())
		require.True(t, strings.HasSuffix(st.got(), body))
		require.Less(t, tunnelHad, len(body)/4, "the upstream finished while the tunnel had a quarter of the response")
		require.Zero(t, testutil.ToFloat64(o.m.readAhead), "soapgw_origin_readahead_bytes back to 0")
	})
}

// windowStream takes writes until it holds window bytes, then blocks every write until
// release is closed: a stream window that the link drains only minutes later.
type windowStream struct {
	pacedStream
	window  int
	release chan struct{}
}

func (s *windowStream) Write(p []byte) (int, error) {
	if len(s.got())+len(p) > s.window {
		<-s.release
	}
	return s.pacedStream.Write(p)
}

// TestOriginReadsAheadOfAFullWindow: a write into a full stream window waits for the
// link, so the origin must have switched to reading ahead before the window was full, not
// after a write that took long: here the window stays shut until the upstream is done.
func TestOriginReadsAheadOfAFullWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o, err := NewOrigin(OriginConfig{}, nil, nil)
		require.NoError(t, err)
		body := strings.Repeat("<item>a full window</item>", 40000) // 1 MB
		cc, sc := net.Pipe()
		defer cc.Close()
		defer sc.Close()
		st := &windowStream{window: 256 << 10, release: make(chan struct{})}
		go func() {
			_, _ = fmt.Fprintf(sc, "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: %d\r\n\r\n", len(body))
			for off := 0; off < len(body); off += 1448 {
				_, _ = io.WriteString(sc, body[off:min(off+1448, len(body))])
			}
			close(st.release) // the upstream is done: the link may drain now
		}()
		uc := &upstreamConn{conn: cc, br: bufio.NewReaderSize(cc, 16<<10)}
		resp, err := httpwire.ReadResponse(uc.br, "POST", httpwire.Limits{})
		require.NoError(t, err)
		ra := &readAhead{Stream: st, tokens: o.aheadTokens, gauge: o.m.readAhead}
		_, err = o.sendResponse(ra, uc, resp) // would block for good without the read-ahead
		require.NoError(t, err)
		require.NoError(t, ra.finish())
		require.True(t, strings.HasSuffix(st.got(), body))
	})
}
