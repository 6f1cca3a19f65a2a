package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/httpwire"
	"github.com/soapgw/soapgw/internal/testutil"
	"github.com/soapgw/soapgw/internal/tunnel"
)

// Responses of unknown length (chunked, close-delimited) are held while the upstream
// keeps sending, so the tunnel codes them whole, and flushed only when the upstream falls
// silent while the client waits on bytes the origin holds.

// copyCodec is the simplest tunnel codec: a payload is the message itself. It makes the
// tunnel count a message as coded, which is all these tests look at.
type copyCodec struct{}

const copyCodecID uint8 = 9

func (copyCodec) ID() uint8                                     { return copyCodecID }
func (copyCodec) Format() uint32                                { return 1 }
func (copyCodec) NewEncoder() (tunnel.MessageEncoder, error)    { return copyCoder{}, nil }
func (copyCodec) NewDecoder(int) (tunnel.MessageDecoder, error) { return copyCoder{}, nil }

type copyCoder struct{}

func (copyCoder) Encode(dst, msg []byte) ([]byte, error)     { return append(dst, msg...), nil }
func (copyCoder) Decode(dst, payload []byte) ([]byte, error) { return append(dst, payload...), nil }

// copyCodecTunnel gives both tunnel ends the copy codec; the origin codes every message
// (responses) with it, the edge none (requests), so the origin's "sent" counts are the
// responses alone.
func copyCodecTunnel(origin bool, c *tunnel.Config) {
	c.Codecs = []tunnel.MessageCodec{copyCodec{}}
	c.CodecName = func(uint8) string { return "copy" }
	if origin {
		c.Encoding = tunnel.Prefer(0, copyCodecID)
	}
}

// gatherSum adds up the samples of a metric family whose labels match every one given.
func gatherSum(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue metrics
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// codecCounts are the origin's tunnel counts of response messages.
type codecCounts struct{ coded, identity, flushed float64 }

func originCodecCounts(t testing.TB, reg prometheus.Gatherer) codecCounts {
	return codecCounts{
		coded:    gatherSum(t, reg, "soapgw_tunnel_codec_messages_total", map[string]string{"direction": "sent", "codec": "copy"}),
		identity: gatherSum(t, reg, "soapgw_tunnel_codec_messages_total", map[string]string{"direction": "sent", "codec": "identity"}),
		flushed:  gatherSum(t, reg, "soapgw_tunnel_codec_fallbacks_total", map[string]string{"reason": "flushed"}),
	}
}

// scriptedUpstream answers every request on its connections by running script, which
// writes the response itself (in as many writes, with as many pauses as it likes) and
// reports whether the connection stays open.
func scriptedUpstream(t *testing.T, script func(c net.Conn, req *httpwire.Request) (keep bool)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(2 * testDeadline))
				br := bufio.NewReader(c)
				for {
					req, err := httpwire.ReadRequest(br, httpwire.Limits{})
					if err != nil {
						return
					}
					if _, err := io.Copy(io.Discard, req.Body); err != nil {
						return
					}
					if !script(c, req) {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// soapItems is a SOAP response body of n repeated items.
func soapItems(n int) string {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="utf-8"?><soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><ListResponse xmlns="urn:inventory">`)
	for i := range n {
		fmt.Fprintf(&b, "<item><id>%d</id><name>part-%d</name><qty>%d</qty></item>", i, i*7, i%13)
	}
	b.WriteString("</ListResponse></soap:Body></soap:Envelope>\r\n\x00\xff")
	return b.String()
}

// chunked frames parts as chunks (with an extension on the first, as some stacks send)
// and ends the body.
func chunked(parts ...string) string {
	var b strings.Builder
	for i, p := range parts {
		b.WriteString(strconv.FormatInt(int64(len(p)), 16))
		if i == 0 {
			b.WriteString(";ext=1")
		}
		b.WriteString("\r\n" + p + "\r\n")
	}
	b.WriteString("0\r\n\r\n")
	return b.String()
}

// chunkFrames frames each part as one chunk, without the last chunk.
func chunkFrames(parts ...string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, strconv.FormatInt(int64(len(p)), 16)+"\r\n"+p+"\r\n")
	}
	return out
}

// split cuts s into n nearly equal parts.
func split(s string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, s[i*len(s)/n:(i+1)*len(s)/n])
	}
	return out
}

const (
	chunkedHead = "HTTP/1.1 200 OK\r\nContent-Type: text/xml; charset=utf-8\r\nTransfer-Encoding: chunked\r\nX-After: y\r\n\r\n"
	closeHead   = "HTTP/1.1 200 OK\r\nContent-Type: text/xml; charset=utf-8\r\nConnection: close\r\nX-After: y\r\n\r\n"
)

// A response of unknown length the upstream sends without pausing is coded whole: no
// flush, no fallback, and it reaches the client byte for byte.
func TestOriginCodesPromptUnknownLengthResponse(t *testing.T) {
	body := soapItems(400) // ~25 KiB: a typical large SOAP answer, within one stream window
	small := soapItems(40)
	// The flush delay is long in most cases, so that a loaded test machine cannot make a
	// pause of the upstream out of a scheduling hiccup of the origin; the first case uses
	// the default, with a response the origin has whole in its buffer after the head.
	for _, tc := range []struct {
		name   string
		body   string
		writes []string // written back to back, one write each
		close  bool     // close-delimited: the upstream closes after the last write
		delay  time.Duration
	}{
		{name: "chunked, default delay", body: small, writes: []string{chunkedHead + chunked(split(small, 3)...)}},
		{name: "chunked, one write", body: body, writes: []string{chunkedHead + chunked(split(body, 8)...)}, delay: testDeadline},
		{name: "chunked, one chunk", body: body, writes: []string{chunkedHead + chunked(body)}, delay: testDeadline},
		{
			// As a SOAP stack serializing into its output buffer does: a write per chunk,
			// and the last chunk on its own.
			name:   "chunked, a write per chunk",
			body:   body,
			writes: append(append([]string{chunkedHead}, chunkFrames(split(body, 8)...)...), "0\r\n\r\n"),
			delay:  testDeadline,
		},
		{name: "close-delimited", body: body, writes: []string{closeHead + body}, close: true, delay: testDeadline},
		{name: "close-delimited, several writes", body: body, writes: append([]string{closeHead}, split(body, 5)...), close: true, delay: testDeadline},
		{name: "chunked, empty body", writes: []string{chunkedHead + "0\r\n\r\n"}, delay: testDeadline},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.body
			up := scriptedUpstream(t, func(c net.Conn, _ *httpwire.Request) bool {
				for _, w := range tc.writes {
					if _, err := io.WriteString(c, w); err != nil {
						return false
					}
				}
				return !tc.close
			})
			reg := prometheus.NewRegistry()
			env := newEnv(t, envConfig{
				Upstreams:           []Upstream{{Name: "up", Address: up, PoolSize: 1}},
				Tunnel:              copyCodecTunnel,
				OriginTunnelMetrics: tunnel.NewMetrics(reg),
				StreamFlushDelay:    tc.delay,
			})
			cl := env.dial()
			for i := range 2 { // the second exchange finds a pooled (or a new) connection
				cl.send(soapRequest(1, "/svc", "", "<list/>"))
				resp, got := cl.read("POST")
				require.Equal(t, 200, resp.StatusCode)
				require.True(t, resp.Chunked, "a body of unknown length goes chunked to an HTTP/1.1 client")
				require.Equal(t, "y", resp.Header.Get("X-After"))
				require.Equal(t, want, string(got))
				require.Eventually(t, func() bool {
					return originCodecCounts(t, reg).coded == float64(i+1)
				}, testDeadline, time.Millisecond, "response %d coded", i)
			}
			c := originCodecCounts(t, reg)
			require.Zero(t, c.flushed, "no response was flushed")
			require.Zero(t, c.identity, "no response went identity")
		})
	}
}

// A response of unknown length whose upstream pauses mid-body reaches the client in
// parts: each part arrives while the upstream still holds the next one back (it sends it
// only once the client has the part before), so the test needs no clock. Such a response
// is flushed once, and travels uncoded.
func TestOriginFlushesStalledUnknownLengthResponse(t *testing.T) {
	body := soapItems(60)
	third := len(body) / 3
	for _, tc := range []struct {
		name  string
		wire  []string // written one after the other, each after the client got the part before
		parts []string // the body bytes the client must have before the next write
		close bool
	}{
		{
			name:  "chunked, pause between chunks",
			wire:  []string{chunkedHead + "10\r\n" + body[:16] + "\r\n", chunked(body[16:])},
			parts: []string{body[:16], body[16:]},
		},
		{
			name: "chunked, three pauses",
			wire: []string{
				chunkedHead + chunked(body[:third])[:len(chunked(body[:third]))-5],
				chunked(body[third : 2*third])[:len(chunked(body[third:2*third]))-5],
				chunked(body[2*third:]),
			},
			parts: []string{body[:third], body[third : 2*third], body[2*third:]},
		},
		{
			name:  "chunked, pause inside a chunk",
			wire:  []string{chunkedHead + strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body[:100], body[100:] + "\r\n0\r\n\r\n"},
			parts: []string{body[:100], body[100:]},
		},
		{
			// The origin holds body bytes and has the start of the next chunk-size line
			// buffered: the upstream is silent all the same.
			name:  "chunked, pause inside a chunk-size line",
			wire:  []string{chunkedHead + "20\r\n" + body[:32] + "\r\n" + strconv.FormatInt(int64(len(body)-32), 16)[:1], strconv.FormatInt(int64(len(body)-32), 16)[1:] + "\r\n" + body[32:] + "\r\n0\r\n\r\n"},
			parts: []string{body[:32], body[32:]},
		},
		{
			name:  "close-delimited",
			wire:  []string{closeHead + body[:third], body[third:]},
			parts: []string{body[:third], body[third:]},
			close: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Len(t, tc.parts, len(tc.wire))
			require.Equal(t, body, strings.Join(tc.parts, ""))
			next := make(chan struct{}) // the client got the part before: send the next
			up := scriptedUpstream(t, func(c net.Conn, _ *httpwire.Request) bool {
				for i, w := range tc.wire {
					if i > 0 {
						select {
						case <-next:
						case <-time.After(testDeadline):
							return false
						}
					}
					if _, err := io.WriteString(c, w); err != nil {
						return false
					}
				}
				return !tc.close
			})
			reg := prometheus.NewRegistry()
			env := newEnv(t, envConfig{
				Upstreams:           []Upstream{{Name: "up", Address: up, PoolSize: 1}},
				Tunnel:              copyCodecTunnel,
				OriginTunnelMetrics: tunnel.NewMetrics(reg),
			})
			cl := env.dial()
			cl.send(soapRequest(1, "/svc", "", "<list/>"))
			resp, err := httpwire.ReadResponse(cl.br, "POST", httpwire.Limits{})
			require.NoError(t, err)
			require.Equal(t, 200, resp.StatusCode)
			require.True(t, resp.Chunked)
			require.Equal(t, "y", resp.Header.Get("X-After"))
			for i, p := range tc.parts {
				got := make([]byte, len(p))
				_, err := io.ReadFull(resp.Body, got)
				require.NoError(t, err, "part %d: the origin held it back while the upstream paused", i)
				require.Equal(t, p, string(got), "part %d", i)
				if i+1 < len(tc.parts) {
					select {
					case next <- struct{}{}:
					case <-time.After(testDeadline):
						t.Fatal("the upstream is gone")
					}
				}
			}
			rest, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Empty(t, rest)

			require.Eventually(t, func() bool { return originCodecCounts(t, reg).identity == 1 }, testDeadline, time.Millisecond)
			c := originCodecCounts(t, reg)
			require.Equal(t, 1.0, c.flushed, "the response was flushed, so it went uncoded")
			require.Zero(t, c.coded)
		})
	}
}

// ---- sendResponse against a checking Stream ------------------------------------------

// checkStream is a Stream that fails the test when Write, Flush or CloseWrite overlap, or
// when anything touches it after the response was sent (a timer that outlived it).
type checkStream struct {
	t        *testing.T
	busy     atomic.Bool
	done     atomic.Bool
	flushErr error

	mu      sync.Mutex
	buf     []byte // written, not flushed yet
	out     []byte // flushed
	flushes int
	flushed chan struct{} // a flush pushed bytes
}

func (s *checkStream) enter(op string) {
	if s.done.Load() {
		s.t.Errorf("%s after the response was sent", op)
	}
	if !s.busy.CompareAndSwap(false, true) {
		s.t.Errorf("%s concurrent with another write-side call", op)
	}
}

func (s *checkStream) Read([]byte) (int, error) { return 0, io.EOF }

func (s *checkStream) Write(p []byte) (int, error) {
	s.enter("Write")
	defer s.busy.Store(false)
	time.Sleep(50 * time.Microsecond) // widen the window an overlapping Flush would hit
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf = append(s.buf, p...)
	return len(p), nil
}

func (s *checkStream) Flush() error {
	s.enter("Flush")
	defer s.busy.Store(false)
	if s.flushErr != nil {
		return s.flushErr
	}
	s.mu.Lock()
	pushed := len(s.buf) > 0
	s.out = append(s.out, s.buf...)
	s.buf = s.buf[:0]
	if pushed {
		s.flushes++
	}
	s.mu.Unlock()
	if pushed {
		select {
		case s.flushed <- struct{}{}:
		default:
		}
	}
	return nil
}

func (s *checkStream) CloseWrite() error           { return nil }
func (s *checkStream) Close() error                { return nil }
func (s *checkStream) SetDeadline(time.Time) error { return nil }

// The flush timer runs only while the origin waits on the upstream: its Flush never
// overlaps a Write, its error ends the copy, and it never fires after the response.
func TestSendResponseFlushTimer(t *testing.T) {
	const delay = 2 * time.Millisecond
	errBoom := errors.New("boom")
	for _, tc := range []struct {
		name     string
		flushErr error
		cut      bool // the upstream closes mid-body instead of finishing it
		wantErr  error
	}{
		{name: "parts"},
		{name: "flush fails", flushErr: errBoom, wantErr: errBoom},
		{name: "upstream cut", cut: true, wantErr: io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := NewOrigin(OriginConfig{StreamFlushDelay: delay}, nil, nil)
			require.NoError(t, err)
			st := &checkStream{t: t, flushErr: tc.flushErr, flushed: make(chan struct{}, 1)}
			cc, sc := testutil.TCPPair(t)
			defer cc.Close()
			defer sc.Close()
			_ = cc.SetDeadline(time.Now().Add(testDeadline))
			uc := &upstreamConn{conn: cc, br: bufio.NewReaderSize(cc, 16<<10)}

			// The upstream sends a part, waits for the flush that pushes it (many small
			// writes in between, to race the timer against Write), then the next.
			parts := split(soapItems(40), 4)
			upDone, stop := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(upDone)
				_, _ = io.WriteString(sc, chunkedHead)
				for i, p := range parts {
					for _, piece := range split(p, 16) {
						_, _ = io.WriteString(sc, chunkFrames(piece)[0])
					}
					if tc.cut && i == 1 {
						_ = sc.Close()
						return
					}
					select {
					case <-st.flushed:
					case <-stop: // the copy ended (the flush failed)
						return
					case <-time.After(testDeadline):
						t.Error("no flush while the upstream paused")
						return
					}
				}
				_, _ = io.WriteString(sc, "0\r\n\r\n")
			}()
			resp, err := httpwire.ReadResponse(uc.br, "POST", httpwire.Limits{})
			require.NoError(t, err)
			_, err = o.sendResponse(st, uc, resp)
			st.done.Store(true)
			close(stop)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
			}
			_ = sc.Close()
			<-upDone
			time.Sleep(20 * delay) // a timer left behind would fire now and be caught

			if tc.wantErr == nil {
				st.mu.Lock()
				defer st.mu.Unlock()
				all := append(append([]byte(nil), st.out...), st.buf...)
				require.True(t, bytes.HasSuffix(all, []byte(strings.Join(parts, ""))), "body whole and in order")
				require.GreaterOrEqual(t, st.flushes, len(parts), "a flush at each pause")
			}
		})
	}
}
