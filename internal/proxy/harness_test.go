package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/httpwire"
	"github.com/soapgw/soapgw/internal/ledger"
	"github.com/soapgw/soapgw/internal/testutil"
	"github.com/soapgw/soapgw/internal/tunnel"
)

// testDeadline bounds every socket operation of a test.
const testDeadline = 4 * time.Second

// ---- raw-socket upstream -------------------------------------------------------------

// upstreamReq is one request as a fake upstream received it.
type upstreamReq struct {
	raw  []byte // exact bytes consumed from the socket: head and (framed) body
	req  *httpwire.Request
	body []byte
	conn int // index of the connection it arrived on
}

// respondFunc answers one request with raw response bytes; closeConn closes the
// connection after writing them (needed for close-delimited responses).
type respondFunc func(n int, r upstreamReq) (resp []byte, closeConn bool)

// fakeUpstream is an HTTP/1.x server on a raw socket that records request bytes.
type fakeUpstream struct {
	t       testing.TB
	ln      net.Listener
	respond respondFunc
	got     chan upstreamReq // every request, as it arrives (before it is answered)
	// idle, when set, closes a connection that waits that long for its next request (a
	// server's keep-alive idle timeout).
	idle   atomic.Int64 // time.Duration
	closed atomic.Int32 // connections this side has closed

	mu    sync.Mutex
	reqs  []upstreamReq
	conns []net.Conn
	wg    sync.WaitGroup
}

func newUpstream(t testing.TB, respond respondFunc) *fakeUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	u := &fakeUpstream{t: t, ln: ln, respond: respond, got: make(chan upstreamReq, 64)}
	u.wg.Add(1)
	go u.accept()
	t.Cleanup(u.close)
	return u
}

func (u *fakeUpstream) addr() string { return u.ln.Addr().String() }

func (u *fakeUpstream) close() {
	_ = u.ln.Close()
	u.mu.Lock()
	for _, c := range u.conns {
		_ = c.Close()
	}
	u.mu.Unlock()
	u.wg.Wait()
}

func (u *fakeUpstream) requests() []upstreamReq {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]upstreamReq(nil), u.reqs...)
}

func (u *fakeUpstream) numConns() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.conns)
}

func (u *fakeUpstream) accept() {
	defer u.wg.Done()
	for {
		c, err := u.ln.Accept()
		if err != nil {
			return
		}
		u.mu.Lock()
		idx := len(u.conns)
		u.conns = append(u.conns, c)
		u.mu.Unlock()
		u.wg.Add(1)
		go func() {
			defer u.wg.Done()
			defer u.closed.Add(1)
			defer c.Close()
			u.serve(c, idx)
		}()
	}
}

// recReader keeps every byte read from the socket.
type recReader struct {
	r   io.Reader
	buf []byte
}

func (r *recReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.buf = append(r.buf, p[:n]...)
	return n, err
}

func (u *fakeUpstream) serve(c net.Conn, idx int) {
	_ = c.SetDeadline(time.Now().Add(2 * testDeadline))
	rec := &recReader{r: c}
	br := bufio.NewReader(rec)
	for first := true; ; first = false {
		if idle := time.Duration(u.idle.Load()); idle > 0 && !first {
			_ = c.SetReadDeadline(time.Now().Add(idle))
		}
		start := len(rec.buf) - br.Buffered()
		req, err := httpwire.ReadRequest(br, httpwire.Limits{})
		if err != nil {
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return
		}
		end := len(rec.buf) - br.Buffered()
		r := upstreamReq{raw: append([]byte(nil), rec.buf[start:end]...), req: req, body: body, conn: idx}
		u.mu.Lock()
		n := len(u.reqs)
		u.reqs = append(u.reqs, r)
		u.mu.Unlock()
		u.got <- r
		resp, closeConn := u.respond(n, r)
		if _, err := c.Write(resp); err != nil {
			return
		}
		if closeConn {
			return
		}
	}
}

// okResponse answers every request with a small SOAP body.
func okResponse(body string) respondFunc {
	return func(int, upstreamReq) ([]byte, bool) {
		return []byte("HTTP/1.1 200 OK\r\nContent-Type: text/xml; charset=utf-8\r\nContent-Length: " +
			strconv.Itoa(len(body)) + "\r\n\r\n" + body), false
	}
}

// ---- tunnel, origin and edge ---------------------------------------------------------

// envConfig describes one edge ⇄ tunnel ⇄ origin setup.
type envConfig struct {
	Upstreams   []Upstream
	Routes      []Route  // default: one catch-all route to upstream "up" via peer "p"
	Listeners   []string // default: "main"
	EdgeLimits  Limits
	Metrics     *Metrics
	ReplayLimit int64
	// Opener, when set, replaces the plain opener on the client session; it receives it.
	Opener func(base Opener) Opener
	// Accept, when set, sees every stream the origin session accepts; returning false
	// means the hook took care of it and the origin does not serve it.
	Accept func(st *tunnel.Stream) bool
	// OriginStream, when set, wraps every stream the origin serves (e.g. to add what a UDP
	// tunnel stream can tell).
	OriginStream func(st *tunnel.Stream) Stream
	// Tunnel, when set, adjusts the tunnel configuration of the edge's session (origin
	// false) and of the origin's (origin true), e.g. to give them codecs.
	Tunnel func(origin bool, c *tunnel.Config)
	// OriginTunnelMetrics, when set, collects the origin session's tunnel metrics.
	OriginTunnelMetrics *tunnel.Metrics
	// ListenTLS, when set, makes the edge's listeners speak TLS with it.
	ListenTLS *tls.Config
	// StreamFlushDelay is the origin's OriginConfig.StreamFlushDelay.
	StreamFlushDelay time.Duration
	// OneWay is the edge's EdgeConfig.OneWay; Ledger and RedeliverInDoubt the origin's.
	OneWay            *OneWayConfig
	Ledger            *ledger.Ledger
	RedeliverInDoubt  bool
	OneWayConcurrency int
	// ClientWatchDelay is the edge's watchDelay: 0 (the default here) watches each
	// client from the moment its request is read, so tests reach the watch at once.
	ClientWatchDelay time.Duration
}

// testEnv is a running edge ⇄ tunnel ⇄ origin pair on loopback.
type testEnv struct {
	t      testing.TB
	edge   *Edge
	origin *Origin
	cs, ss *tunnel.Session
	addrs  map[string]string // listener name → address
	opens  atomic.Int32      // OpenStream calls on the base opener

	serveDone chan struct{}
}

func tcpConnPair(t testing.TB) (net.Conn, net.Conn) { return testutil.TCPPair(t) }

func newEnv(t testing.TB, cfg envConfig) *testEnv {
	t.Helper()
	if cfg.Routes == nil {
		cfg.Routes = []Route{{Peer: "p", Upstream: "up"}}
	}
	if cfg.Listeners == nil {
		cfg.Listeners = []string{"main"}
	}
	if cfg.EdgeLimits.ExchangeTimeout == 0 {
		cfg.EdgeLimits.ExchangeTimeout = testDeadline
	}

	// Tunnel session pair over TCP loopback.
	cconn, sconn := tcpConnPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	type res struct {
		s   *tunnel.Session
		err error
	}
	ch := make(chan res, 1)
	ccfg, scfg := &tunnel.Config{Node: "edge"}, &tunnel.Config{Node: "origin"}
	if cfg.Tunnel != nil {
		cfg.Tunnel(false, ccfg)
		cfg.Tunnel(true, scfg)
	}
	go func() {
		ss, err := tunnel.ServerSession(ctx, sconn, scfg, cfg.OriginTunnelMetrics)
		ch <- res{ss, err}
	}()
	cs, err := tunnel.ClientSession(ctx, cconn, ccfg, nil, "p")
	require.NoError(t, err)
	r := <-ch
	require.NoError(t, r.err)
	e := &testEnv{t: t, cs: cs, ss: r.s, addrs: map[string]string{}, serveDone: make(chan struct{})}

	// Origin serving accepted streams.
	origin, err := NewOrigin(OriginConfig{Node: "origin-test", Upstreams: cfg.Upstreams, Limits: Limits{ExchangeTimeout: testDeadline},
		StreamFlushDelay: cfg.StreamFlushDelay, Ledger: cfg.Ledger, RedeliverInDoubt: cfg.RedeliverInDoubt,
		OneWayConcurrency: cfg.OneWayConcurrency}, cfg.Metrics, nil)
	require.NoError(t, err)
	e.origin = origin
	var serving sync.WaitGroup
	go func() {
		defer close(e.serveDone)
		for {
			st, err := e.ss.AcceptStream(context.Background())
			if err != nil {
				serving.Wait()
				return
			}
			if cfg.Accept != nil && !cfg.Accept(st) {
				continue
			}
			serving.Add(1)
			go func() {
				defer serving.Done()
				var ost Stream = st
				if cfg.OriginStream != nil {
					ost = cfg.OriginStream(st)
				}
				origin.ServeStream(context.Background(), ost)
			}()
		}
	}()

	// Edge.
	var opener Opener = OpenerFunc(func(ctx context.Context) (Stream, error) {
		e.opens.Add(1)
		st, err := e.cs.OpenStream(ctx)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return st, nil
	})
	if cfg.Opener != nil {
		opener = cfg.Opener(opener)
	}
	edge, err := NewEdge(EdgeConfig{
		Routes:      cfg.Routes,
		Peers:       map[string]Opener{"p": opener},
		Limits:      cfg.EdgeLimits,
		ReplayLimit: cfg.ReplayLimit,
		OneWay:      cfg.OneWay,
	}, cfg.Metrics, nil)
	require.NoError(t, err)
	edge.watchDelay = cfg.ClientWatchDelay
	e.edge = edge
	var serveWG sync.WaitGroup
	for _, name := range cfg.Listeners {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		e.addrs[name] = ln.Addr().String()
		if cfg.ListenTLS != nil {
			ln = tls.NewListener(ln, cfg.ListenTLS)
		}
		serveWG.Add(1)
		go func() {
			defer serveWG.Done()
			_ = edge.Serve(ln, name)
		}()
	}

	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), testDeadline)
		defer cancel()
		_ = edge.Shutdown(sctx)
		serveWG.Wait()
		_ = e.cs.Close()
		_ = e.ss.Close()
		<-e.serveDone
		origin.Close()
	})
	return e
}

// dial connects a client to the edge listener name (default "main").
func (e *testEnv) dial(name ...string) *client {
	e.t.Helper()
	n := "main"
	if len(name) > 0 {
		n = name[0]
	}
	c, err := net.Dial("tcp", e.addrs[n])
	require.NoError(e.t, err)
	_ = c.SetDeadline(time.Now().Add(testDeadline))
	e.t.Cleanup(func() { _ = c.Close() })
	return &client{t: e.t, c: c, br: bufio.NewReader(c)}
}

// client is a raw HTTP client connection to the edge.
type client struct {
	t  testing.TB
	c  net.Conn
	br *bufio.Reader
}

func (c *client) send(raw string) {
	c.t.Helper()
	// Each exchange gets testDeadline: a test of thousands of calls on one connection
	// (-race on a loaded host) outlasts one deadline for the connection.
	_ = c.c.SetDeadline(time.Now().Add(testDeadline))
	_, err := io.WriteString(c.c, raw)
	require.NoError(c.t, err)
}

// read reads one response (to method) and its whole body.
func (c *client) read(method string) (*httpwire.Response, []byte) {
	c.t.Helper()
	resp, err := httpwire.ReadResponse(c.br, method, httpwire.Limits{})
	require.NoError(c.t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return resp, body
}

// readFault reads one response that must be a gateway fault.
func (c *client) readFault() parsedFault {
	c.t.Helper()
	return parseFault(c.t, c.br, "POST")
}

// readExactly reads n raw bytes.
func (c *client) readExactly(n int) []byte {
	c.t.Helper()
	b := make([]byte, n)
	_, err := io.ReadFull(c.br, b)
	require.NoError(c.t, err)
	return b
}

// requireClosed checks that the edge closed the connection (EOF or reset, no more bytes).
func (c *client) requireClosed() {
	c.t.Helper()
	b, err := c.br.ReadByte()
	require.Error(c.t, err, "expected the edge to close the connection, got byte %q", b)
	var ne net.Error
	if errors.As(err, &ne) {
		require.False(c.t, ne.Timeout(), "connection still open: %v", err)
	}
}

// soapRequest builds a SOAP 1.1 POST.
func soapRequest(minor int, target string, extra string, body string) string {
	return "POST " + target + " HTTP/1." + strconv.Itoa(minor) + "\r\n" +
		"Host: svc.example\r\n" +
		"Content-Type: text/xml; charset=utf-8\r\n" +
		"SOAPAction: \"urn:Add\"\r\n" + extra +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}
