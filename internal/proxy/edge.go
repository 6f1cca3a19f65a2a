package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/soapgw/soapgw/internal/envelope"
	"github.com/soapgw/soapgw/internal/httpwire"
	"github.com/soapgw/soapgw/internal/ratelog"
)

// Edge terminates HTTP/1.0 and HTTP/1.1 from unmodified clients and carries every exchange
// over a tunnel stream to the origin gateway. See doc.go for the whole path.
type Edge struct {
	cfg EdgeConfig
	lim Limits // as started; MaxConcurrentExchanges sizes inflight. The rest: limits()

	routes atomic.Pointer[[]Route] // swapped by Reconfigure
	cur    atomic.Pointer[Limits]  // swapped by Reconfigure
	m      *Metrics
	log    *slog.Logger

	// watchDelay is how long an exchange waits for the origin before the edge watches
	// its client for a reset (watchClient): clientWatchDelay; tests set 0.
	watchDelay time.Duration

	inflight chan struct{}    // semaphore: MaxConcurrentExchanges
	refusing chan struct{}    // semaphore: goroutines answering refused connections
	warn     *ratelog.Limiter // refusals a client could provoke by the thousand

	// abortAll is cancelled when a drain's deadline passes: exchanges still waiting on the
	// tunnel are reset so Shutdown can return.
	abortCtx   context.Context
	abortAll   context.CancelFunc
	abortWatch *parentWatch // ends the exchanges with abortCtx

	fwd *forwarder // delivers one-way messages from the spool; nil when off

	large largeResponses // operations whose responses were diverted lately (divert.go)

	// Client connections are served by workers (connWorker): one that has served a
	// connection waits for the next, handed over on nextConn, until stopWorkers closes.
	nextConn           chan acceptedConn
	stopWorkers        chan struct{} // closed by Shutdown
	idleWorkers        atomic.Int32  // waiting on nextConn
	workers            sync.WaitGroup
	startedConnWorkers atomic.Int64 // ever (tests read it)

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*clientConn]struct{}
	draining  bool
	wg        sync.WaitGroup
}

// NewEdge checks cfg and returns an edge ready to Serve listeners.
func NewEdge(cfg EdgeConfig, m *Metrics, log *slog.Logger) (*Edge, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.ReplayLimit <= 0 {
		cfg.ReplayLimit = 1 << 20
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lim := cfg.Limits.withDefaults()
	abortCtx, abortAll := context.WithCancel(context.Background())
	e := &Edge{
		abortCtx: abortCtx, abortAll: abortAll, abortWatch: watchParent(abortCtx),
		cfg: cfg, lim: lim, m: m, log: log.With("role", "edge"),
		inflight:    make(chan struct{}, lim.MaxConcurrentExchanges),
		refusing:    make(chan struct{}, maxRefusing),
		warn:        ratelog.New(log.With("role", "edge"), 10*time.Second),
		listeners:   map[net.Listener]struct{}{},
		conns:       map[*clientConn]struct{}{},
		watchDelay:  clientWatchDelay,
		large:       largeResponses{now: time.Now},
		nextConn:    make(chan acceptedConn),
		stopWorkers: make(chan struct{}),
	}
	e.routes.Store(&cfg.Routes)
	e.cur.Store(&lim)
	if cfg.OneWay != nil {
		e.fwd = newForwarder(e, cfg.OneWay)
		e.wg.Add(1)
		go func() { defer e.wg.Done(); e.fwd.run(abortCtx) }()
	}
	return e, nil
}

// Serve accepts client connections on ln until ln is closed or Shutdown is called. name
// is the listener's name, which routes may match.
func (e *Edge) Serve(ln net.Listener, name string) error {
	e.mu.Lock()
	if e.draining {
		e.mu.Unlock()
		return nil
	}
	e.listeners[ln] = struct{}{}
	e.mu.Unlock()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			e.mu.Lock()
			draining := e.draining
			e.mu.Unlock()
			if draining || errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Back off on accept errors such as EMFILE instead of spinning (as
			// net/http.Server does).
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			e.log.Warn("accept failed", "listener", name, "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		cc := newClientConn(c)
		e.mu.Lock()
		if e.draining {
			e.mu.Unlock()
			_ = c.Close()
			return nil
		}
		if limit := e.limits().MaxClientConnections; len(e.conns) >= limit {
			e.mu.Unlock()
			e.refuseConn(c, limit)
			continue
		}
		e.conns[cc] = struct{}{}
		e.wg.Add(1)
		e.mu.Unlock()
		e.m.clientConns.Inc()
		e.m.connsTotal.Inc()
		ac := acceptedConn{cc, name}
		select {
		case e.nextConn <- ac: // an idle worker took it
		default:
			e.workers.Add(1)
			e.startedConnWorkers.Add(1)
			go e.connWorker(ac)
		}
	}
}

// acceptedConn is a client connection for a worker, with the name of its listener.
type acceptedConn struct {
	cc       *clientConn
	listener string
}

// maxIdleConnWorkers bounds the connection workers that wait for a connection.
const maxIdleConnWorkers = 64

// connWorker serves c, then waits for another connection while fewer than
// maxIdleConnWorkers wait, until Shutdown. A goroutine per connection cost clients that
// open a connection per call (HTTP/1.0 stacks) a goroutine start and a stack that grew
// anew through the exchange every time: 7 % of the edge's CPU in their profiles. e.wg
// counts the connection it serves, e.workers the worker.
func (e *Edge) connWorker(c acceptedConn) {
	defer e.workers.Done()
	for {
		e.serveAccepted(c)
		if e.idleWorkers.Add(1) > maxIdleConnWorkers {
			e.idleWorkers.Add(-1)
			return
		}
		select {
		case c = <-e.nextConn:
			e.idleWorkers.Add(-1)
		case <-e.stopWorkers:
			e.idleWorkers.Add(-1)
			return
		}
	}
}

// serveAccepted serves one client connection and forgets it.
func (e *Edge) serveAccepted(c acceptedConn) {
	defer e.wg.Done()
	defer func() {
		if c.cc.linger {
			lingerClose(c.cc.Conn) // still in e.conns: Shutdown's abort ends it early
		}
		e.mu.Lock()
		delete(e.conns, c.cc)
		e.mu.Unlock()
		e.m.clientConns.Dec()
		_ = c.cc.Close()
	}()
	e.serveConn(c.cc, c.listener)
}

// refuseConn answers a client connection beyond MaxClientConnections with a Fault (503 in
// FaultStatusHTTP) and closes it, lingering as after any fault that leaves a request
// unread. The answer is written by a goroutine with a short deadline, at most maxRefusing
// at once (beyond that the connection is just closed), so a flood of connections can
// neither block the accept loop nor pile up goroutines.
func (e *Edge) refuseConn(c net.Conn, limit int) {
	e.m.connsRefused.Inc()
	e.m.gatewayErrors.WithLabelValues("edge", causeTooManyConns).Inc()
	e.warn.Warn(causeTooManyConns, "client connection refused: too many open", "limit", limit, "client", c.RemoteAddr().String())
	select {
	case e.refusing <- struct{}{}:
	default:
		_ = c.Close()
		return
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer func() { <-e.refusing }()
		msg := fmt.Sprintf("soapgw: the edge has %d client connections open (limits.max_client_connections); try again later", limit)
		e.faultAndClose(c, &gatewayError{Status: 503, Cause: causeTooManyConns, Message: msg})
	}()
}

// faultAndClose answers a connection whose request was never read with ge (a SOAP 1.1
// Fault in HTTP/1.1, the connection's last response) and closes it, lingering: the
// client may be sending its request, and a reset would lose the fault.
func (e *Edge) faultAndClose(c net.Conn, ge *gatewayError) {
	_ = c.SetWriteDeadline(time.Now().Add(faultWriteTimeout))
	if _, err := c.Write(faultResponse(nil, ge, e.limits().FaultStatus, soap11, 1, "", true)); err != nil {
		_ = c.Close()
		return
	}
	lingerClose(c)
}

// maxRefusing bounds the goroutines answering refused client connections.
const maxRefusing = 64

// Shutdown stops accepting, lets exchanges in flight finish, closes idle keep-alive
// connections, and waits until all are done or ctx expires (then closes the rest).
func (e *Edge) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	if !e.draining {
		if e.fwd != nil {
			close(e.fwd.stop) // deliveries in flight finish within the drain
		}
		close(e.stopWorkers)
	}
	e.draining = true
	for ln := range e.listeners {
		_ = ln.Close()
	}
	for cc := range e.conns {
		if !cc.busy.Load() {
			// Wakes a connection blocked waiting for the next request; one that is
			// answering a request checks draining after it and closes.
			_ = cc.SetReadDeadline(time.Unix(1, 0))
		}
	}
	e.mu.Unlock()
	done := make(chan struct{})
	go func() { e.wg.Wait(); e.workers.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		e.abortAll()
		e.mu.Lock()
		for cc := range e.conns {
			_ = cc.Close()
		}
		e.mu.Unlock()
		<-done
		return fmt.Errorf("edge drain: %w", ctx.Err())
	}
}

func (e *Edge) isDraining() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.draining
}

var (
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 16<<10) }}
	writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 16<<10) }}
	msgPool    = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}
)

// maxPooledMsg is the largest message buffer the origin puts back in msgPool: one grown
// for a large request body is left to the collector rather than kept for small heads.
const maxPooledMsg = 64 << 10

// putMsgBuf gives b, taken from msgPool as *mp, back to the pool unless it grew past
// maxPooledMsg.
func putMsgBuf(mp *[]byte, b []byte) {
	if cap(b) <= maxPooledMsg {
		*mp = b[:0]
		msgPool.Put(mp)
	}
}

// serveConn reads requests from one client connection and answers them in order, which
// is all HTTP/1.1 pipelining asks: the next request's bytes wait in br meanwhile.
func (e *Edge) serveConn(cc *clientConn, listener string) {
	// Responses are written whole or in large pieces; Nagle would only hold back the last
	// segment waiting for the client's delayed ACK (seed 003 §6.5). Go accepts every TCP
	// connection with TCP_NODELAY set already: setting it again here cost a system call
	// per connection, a call per exchange with HTTP/1.0 clients.
	//
	// The 32 KiB of buffers are held only while a request is read or answered: an idle
	// keep-alive connection (there may be thousands) waits for its next request holding
	// no buffer (clientConn.waitRequest).
	var br *bufio.Reader
	var bw *bufio.Writer
	release := func() {
		if br != nil {
			br.Reset(nil)
			readerPool.Put(br)
			_ = bw.Flush()
			bw.Reset(nil)
			writerPool.Put(bw)
			br, bw = nil, nil
		}
	}
	defer release()
	defer cc.dropFirst()
	if !e.clientHandshake(cc, listener) {
		return
	}
	for {
		// Checked and armed under the lock Shutdown holds while it wakes idle
		// connections, so Shutdown's wake-up cannot be overwritten by this deadline.
		e.mu.Lock()
		if e.draining {
			e.mu.Unlock()
			return
		}
		_ = cc.SetReadDeadline(time.Now().Add(e.limits().IdleTimeout))
		e.mu.Unlock()
		if br == nil || br.Buffered() == 0 {
			// Nothing pipelined: wait for the next request without buffers.
			release()
			if !cc.waitRequest() {
				return // idle timeout, client closed, or drain
			}
			br = readerPool.Get().(*bufio.Reader)
			br.Reset(cc)
			bw = writerPool.Get().(*bufio.Writer)
			bw.Reset(cc)
		}
		cc.busy.Store(true)
		start := time.Now()
		// The hard bound; the exchange's progress clock ends it sooner when it stalls.
		deadline := start.Add(e.limits().ExchangeMaxDuration)
		_ = cc.SetDeadline(deadline)
		// The head must come within idle_timeout: the exchange's bounds are long (they
		// wait for slow servers), a client trickling a head is not a slow server.
		if idle := start.Add(e.limits().IdleTimeout); idle.Before(deadline) {
			_ = cc.SetReadDeadline(idle)
		}
		req, err := httpwire.ReadRequest(br, httpwire.Limits{MaxHeaderBytes: e.limits().MaxHeaderBytes})
		if err != nil {
			e.rejectRequest(cc, bw, err)
			return
		}
		_ = cc.SetReadDeadline(deadline)
		keep := e.exchange(cc, bw, req, listener, start, deadline)
		cc.busy.Store(false)
		if !keep {
			return
		}
	}
}

// rejectRequest answers a request that could not be parsed and closes the connection:
// after a framing error nothing that follows on the connection can be trusted.
func (e *Edge) rejectRequest(cc *clientConn, bw *bufio.Writer, err error) {
	if errors.Is(err, io.EOF) || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed) {
		return
	}
	status := 400
	switch {
	case errors.Is(err, httpwire.ErrHeaderTooLarge):
		status = 431
	case errors.Is(err, httpwire.ErrUnsupportedTransferCoding):
		status = 501
	case errors.Is(err, httpwire.ErrUnsupportedVersion):
		status = 505
	}
	ge := &gatewayError{Status: status, Cause: causeBadRequest, Message: "soapgw: malformed HTTP request: " + err.Error()}
	e.gatewayError(cc, "", "", causeBadRequest, err)
	_, _ = bw.Write(faultResponse(nil, ge, e.limits().FaultStatus, soap11, 1, "", true))
	_ = bw.Flush()
}

func (e *Edge) gatewayError(cc net.Conn, id, upstream, cause string, err error) {
	e.m.gatewayErrors.WithLabelValues("edge", cause).Inc()
	e.log.Warn("gateway error", "exchange", id, "upstream", upstream, "cause", cause, "client", cc.RemoteAddr().String(), "err", err)
}

// exchangeIDPrefix makes exchange ids unique across processes; the counter after it makes
// them unique within one. Sequential ids (rather than 64 random bits each) cost about one
// byte per message under the token codec, which codes them as a delta from the last one.
var (
	exchangeIDPrefix = strconv.FormatUint(uint64(rand.Uint32())|1<<31, 16) + "-"
	exchangeCounter  atomic.Uint64
)

func newExchangeID() string {
	var b [32]byte // the prefix (9 bytes) and a counter (at most 20 digits): one allocation, the string's
	return string(strconv.AppendUint(append(b[:0], exchangeIDPrefix...), exchangeCounter.Add(1), 10))
}

// exchange is one request/response on a client connection, as the edge handles it.
type exchange struct {
	e        *Edge
	cc       *clientConn
	bw       *bufio.Writer
	req      *httpwire.Request
	id       string      // exchange id: in logs of both gateways and in gateway faults
	sv       soapVersion // the client's SOAP version, for faults
	op       string      // SOAP operation, for metrics
	route    *Route
	start    time.Time
	deadline time.Time      // hard bound: start + limits.exchange_max_duration
	clock    *progressClock // ends the exchange when it stalls (limits.exchange_timeout)

	ec       *exchangeCtx // the exchange's context; ending it abandons the exchange (clientWatch, clock)
	watch    clientWatch  // the client's connection, while the exchange waits for the origin
	watching bool         // watch was begun
}

func (x *exchange) upstream() string {
	if x.route == nil {
		return ""
	}
	return x.route.Upstream
}

// fail answers the client with a gateway-made SOAP Fault and reports whether the
// connection may carry another request (not when close is set: e.g. the body was not read).
// status is the HTTP-semantic status (see FaultStatus for the one sent).
func (x *exchange) fail(status int, cause string, err error, close bool) bool {
	x.e.gatewayError(x.cc, x.id, x.upstream(), cause, err)
	x.sendFault(&gatewayError{Status: status, Cause: cause, Message: err.Error()}, close)
	return !close && !x.req.Close
}

// sendFault records a gateway Fault and writes it to the client. The metrics get the
// HTTP-semantic status and the fault code it implies, never the status line limits'
// FaultStatus chose, so they mean the same in both modes.
func (x *exchange) sendFault(ge *gatewayError, close bool) {
	// The exchange deadline may be what failed: give the fault its own time to go out.
	_ = x.cc.SetWriteDeadline(time.Now().Add(faultWriteTimeout))
	x.e.m.exchange("edge", x.upstream(), x.op, ge.Status, "gateway_error", time.Since(x.start))
	x.e.m.fault("edge", x.upstream(), "gateway", gatewayFaultCode(x.sv, ge.Status))
	out := faultResponse(nil, ge, x.e.limits().FaultStatus, x.sv, x.req.ProtoMinor, x.id, close || x.req.Close)
	x.cc.linger = close || x.req.Close
	x.e.m.addBytes("edge", "client_out", int64(len(out)))
	_, _ = x.bw.Write(out)
	_ = x.bw.Flush()
}

// exchange carries one request to the origin and its response back. It returns whether
// the client connection may carry another request.
func (e *Edge) exchange(cc *clientConn, bw *bufio.Writer, req *httpwire.Request, listener string, start, deadline time.Time) bool {
	x := &exchange{
		e: e, cc: cc, bw: bw, req: req,
		id:    cc.affine(newExchangeID(), req),
		sv:    soapVersionOf(req.Header),
		op:    operationOf(req.Header, nil),
		start: start, deadline: deadline,
	}
	// ctx ends when the exchange's clock expires (it stalls, or its hard bound passes),
	// or earlier when a drain's deadline passes (abortCtx); every stream opened for this
	// exchange is reset when it ends. The clock's expiry also ends the client
	// connection's waits and the streams' (roundTrip). One timer, the clock's, bounds
	// the exchange: no context deadline or stream deadline arms another.
	ec := e.abortWatch.newExchange(false)
	ctx := context.Context(ec)
	x.ec = ec
	defer ec.end(nil)
	x.clock = startProgressClock(e.limits().ExchangeTimeout, deadline)
	x.clock.unblockOnExpire(cc)
	x.clock.endOnExpire(ec) // after the hooks: the client's waits end first, as before
	defer x.clock.stop()
	cc.progress = x.clock
	defer func() { cc.progress = nil }()
	if status, err := e.checkTarget(req); err != nil {
		// Never routed: soapgw is not a forward proxy, and the body was not read.
		return x.fail(status, causeBadTarget, err, true)
	}
	host, path := req.Header.Get("Host"), req.Target
	if req.Form() == httpwire.AbsoluteForm {
		// Allowed by limits.allow_absolute_form: route by the URI's own host and path,
		// which RFC 9112 §3.2.2 puts before the Host field.
		host, path = absoluteHostPath(req.Target)
	}
	routes := *e.routes.Load()
	for i := range routes {
		if routes[i].matches(listener, host, path) {
			x.route = &routes[i]
			break
		}
	}
	if x.route == nil {
		// The body was not read: the connection cannot be reused.
		return x.fail(404, causeNoRoute, fmt.Errorf("soapgw: no route for host %q and path %q", host, req.Target), true)
	}
	if req.ContentLength > e.limits().MaxRequestBytes {
		return x.fail(413, causeTooLarge, fmt.Errorf("soapgw: request body of %d bytes exceeds the limit of %d bytes", req.ContentLength, e.limits().MaxRequestBytes), true)
	}
	select {
	case e.inflight <- struct{}{}:
		defer func() { <-e.inflight }()
	default:
		return x.fail(503, causeOverloaded, fmt.Errorf("soapgw: edge overloaded: %d exchanges in flight", e.lim.MaxConcurrentExchanges), true)
	}
	if req.ExpectContinue {
		// Answer 100 Continue here: the client would otherwise wait a full round trip
		// across the tunnel (or its own timeout) before sending the body.
		_, _ = bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		if err := bw.Flush(); err != nil {
			return false
		}
	}

	// The request message: envelope head, then (when it is small enough to replay) the
	// whole body. A body of known, modest size is read before the stream is opened, so
	// the exchange can be sent again if the tunnel refuses it (GOAWAY, connection lost
	// before the first frame): then the origin provably never saw it.
	head := requestHead{
		ExchangeID:    x.id,
		Upstream:      x.route.Upstream,
		Method:        req.Method,
		Target:        req.Target,
		ProtoMinor:    req.ProtoMinor,
		ContentLength: req.ContentLength,
		Expect:        req.ExpectContinue,
		Header:        httpwire.EndToEnd(req.Header),
	}
	mp := msgPool.Get().(*[]byte)
	defer msgPool.Put(mp)
	msg := head.Append((*mp)[:0])
	replayable := req.ContentLength >= 0 && req.ContentLength <= e.cfg.ReplayLimit
	if replayable {
		n := len(msg)
		msg = slices.Grow(msg, int(req.ContentLength))[:n+int(req.ContentLength)]
		*mp = msg[:0]
		if _, err := io.ReadFull(req.Body, msg[n:]); err != nil {
			e.gatewayError(cc, x.id, x.route.Upstream, causeBadRequest, err)
			return false // the client went away or sent less than it announced
		}
		if x.op == "" {
			x.op = operationOf(req.Header, msg[n:])
		}
	}
	*mp = msg[:0] // keep the grown buffer for the next exchange
	raw := requestHeadLen(req)
	if replayable {
		raw += int(req.ContentLength)
	}
	e.m.addBytes("edge", "client_in", int64(raw))
	if ow := e.cfg.OneWay; ow != nil && replayable && req.ContentLength > 0 {
		if body := msg[len(msg)-int(req.ContentLength):]; ow.isOneWay(req.Target, req.Header, body) {
			return e.acceptOneWay(x, head, body)
		}
	}

	defer x.endWatch()
	st, sbr, resp, gwErr, keep := e.roundTrip(ctx, x, msg, replayable)
	if st == nil {
		return keep // a fault was sent
	}
	defer st.Close()
	defer func() { sbr.Reset(nil); readerPool.Put(sbr) }()
	if gwErr != nil {
		// The origin counted it under role="origin"; here it is what the client saw.
		e.m.gatewayErrors.WithLabelValues("edge", gwErr.Cause).Inc()
		e.log.Warn("gateway error at origin", "exchange", x.id, "upstream", x.route.Upstream, "cause", gwErr.Cause, "client", cc.RemoteAddr().String(), "err", gwErr.Message)
		x.sendFault(gwErr, req.Close)
		return !req.Close && drainEOF(sbr) == nil
	}
	return e.respond(x, sbr, resp)
}

// checkTarget refuses what a SOAP endpoint is never sent: CONNECT, targets in authority-
// or asterisk-form, absolute-form unless allowed, and HTTP/1.1 requests without Host
// (RFC 9112 §3.2). Such a request never reaches a tunnel or an upstream.
func (e *Edge) checkTarget(req *httpwire.Request) (int, error) {
	form := req.Form()
	switch {
	case req.Method == "CONNECT":
		return 405, fmt.Errorf("soapgw: CONNECT is not served: this is a SOAP gateway, not a forward proxy")
	case form == httpwire.AbsoluteForm && !e.limits().AllowAbsoluteForm:
		return 400, fmt.Errorf("soapgw: absolute-form request target %q: this is a SOAP gateway, not a forward proxy (limits.allow_absolute_form accepts it)", truncate(req.Target, 200))
	case form == httpwire.AbsoluteForm && !strings.HasPrefix(req.Target, "http://") && !strings.HasPrefix(req.Target, "https://"):
		return 400, fmt.Errorf("soapgw: absolute-form request target %q: only http and https URIs", truncate(req.Target, 200))
	case form == httpwire.AuthorityForm || form == httpwire.AsteriskForm:
		return 400, fmt.Errorf("soapgw: %s request target %q is not a path", form, truncate(req.Target, 200))
	case req.ProtoMinor == 1 && !req.Header.Has("Host"):
		return 400, fmt.Errorf("soapgw: HTTP/1.1 request without a Host field (RFC 9112 §3.2)")
	}
	return 0, nil
}

// absoluteHostPath splits an absolute-form target into its authority and its path (with
// query), "/" when empty.
func absoluteHostPath(target string) (host, path string) {
	_, rest, _ := strings.Cut(target, "://")
	host, path = rest, "/"
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		host, path = rest[:i], rest[i:]
		if path[0] == '?' {
			path = "/" + path
		}
	}
	return host, path
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// roundTrip sends the request message over a tunnel stream and reads the response head,
// retrying on another stream when the tunnel refused the first one before the origin saw
// it (only possible for a replayable message). On failure it answers the client with a
// fault itself and returns a nil stream and whether the connection may be kept.
func (e *Edge) roundTrip(ctx context.Context, x *exchange, msg []byte, replayable bool) (st Stream, sbr *bufio.Reader, resp *responseHead, gwErr *gatewayError, keep bool) {
	peer := x.route.Peer
	opener := e.cfg.Peers[peer]
	if x.route.Opener != nil {
		opener = x.route.Opener
	}
	open, other := e.exchangeOpener(x, opener)
	var lastErr error
	if replayable {
		x.startWatch() // the request is read whole
	}
	// One deferred call ends the close-on-ctx of every stream opened (a defer in the loop
	// would be allocated on each exchange).
	var hooks [3]ctxHookRef
	hooked := 0
	defer func() {
		for _, h := range hooks[:hooked] {
			h.stop()
		}
	}()
	for attempt := 0; attempt < len(hooks); attempt++ {
		var err, writeErr error
		cutShort := false // the origin stopped reading the request before its end
		st, err = open.OpenStream(ctx)
		if err != nil {
			if x.clientWentAway(ctx) {
				return nil, nil, nil, nil, false
			}
			if ctx.Err() != nil {
				return nil, nil, nil, nil, x.fail(504, causeTimeout, fmt.Errorf("soapgw: origin %q not reachable before the exchange ended (%s): %w", peer, x.clock.reason(), err), false)
			}
			return nil, nil, nil, nil, x.fail(503, causeOriginDown, fmt.Errorf("soapgw: origin %q unreachable: %w", peer, err), !replayable)
		}
		opened := st
		hooks[hooked] = x.ec.hookOnce(func() { _ = opened.Close() }) // ctx is x.ec
		hooked++
		// The clock bounds the stream's reads and writes, also while respond relays the
		// response after this returns (stop above has ended the close-on-ctx by then).
		x.clock.onExpire(func() { _ = opened.SetDeadline(time.Unix(1, 0)) })
		if replayable {
			_, err = busyStream{st, x.clock}.Write(msg)
			if err == nil {
				if cerr := st.CloseWrite(); cerr != nil {
					err = &requestEndError{cerr}
				}
			}
		} else {
			err = e.sendStreamed(busyStream{st, x.clock}, msg, x.req)
			switch {
			case errors.Is(err, errTooLarge):
				_ = st.Close()
				return nil, nil, nil, nil, x.fail(413, causeTooLarge, fmt.Errorf("soapgw: request body exceeds the limit of %d bytes", e.limits().MaxRequestBytes), true)
			case errors.Is(err, errClientBody):
				// The stream is reset, so the origin aborts its upstream call and the
				// server never takes the part it got for a whole request.
				_ = st.Close()
				var pe *httpwire.ProtocolError
				if errors.As(err, &pe) {
					// A body that breaks its own framing: say so (nothing of the
					// response was sent yet), then close.
					return nil, nil, nil, nil, x.fail(400, causeMalformedBody, fmt.Errorf("soapgw: malformed request body: %w", pe), true)
				}
				e.gatewayError(x.cc, x.id, x.route.Upstream, causeBadRequest, err)
				return nil, nil, nil, nil, false
			case err == nil:
				x.startWatch()
			case isResetByPeer(err):
				// The origin stopped taking the request: the server (or the origin)
				// answered before its end and the origin drained what it may
				// (early.go, discardRefused). That answer may be waiting on the stream.
				cutShort, writeErr, err = true, err, nil
			}
		}
		var rs *resumer
		if err == nil || isRequestEnd(err) {
			if !cutShort {
				// The whole request is with the tunnel: from here a failure may come
				// after the origin has it, so the response is read through a resumer,
				// which collects it on another connection if this one dies (resume.go).
				rs = newResumer(ctx, x.id, opener, st, e.m.held)
				rs.deadline, rs.broken, rs.clock = x.deadline, err, x.clock
				st, err = rs, nil
			}
			sbr = readerPool.Get().(*bufio.Reader)
			sbr.Reset(st)
			maxHead := e.limits().MaxHeaderBytes + 4096
			var head []byte
			if head, err = readHead(sbr, maxHead); err == nil {
				resp, gwErr, err = envelope.ParseResponse(head)
			}
			switch {
			case err == nil && gwErr != nil && gwErr.Cause == responseDiverted:
				// The response comes over the other tunnel (resumer.divert), and the
				// operation's next calls go there at once (divert.go).
				e.large.noteDiverted(peer, x.op)
				if rs == nil {
					err = writeErr // cut short: there is no exchange to collect elsewhere
				} else if err = rs.divert(opener); err == nil {
					sbr.Reset(rs)
					if head, err = readHead(sbr, maxHead); err == nil {
						resp, gwErr, err = envelope.ParseResponse(head)
					}
				}
			case err == nil && gwErr == nil && other && resp.ContentLength >= 0 && resp.ContentLength < divertMinBytes:
				e.large.forget(peer, x.op) // sent over the other tunnel for nothing
			}
			if err == nil && cutShort {
				// Relayed, and then the connection ends: the rest of the client's
				// request was never read (lingerClose takes what it still sends).
				x.req.Close, x.cc.linger = true, true
			}
			if err == nil {
				return st, sbr, resp, gwErr, true
			}
			sbr.Reset(nil)
			readerPool.Put(sbr)
			if cutShort {
				err = writeErr // no answer came: the reset is what failed
			}
		}
		_ = st.Close()
		lastErr = err
		if !replayable || !isRetryable(err) || ctx.Err() != nil {
			break
		}
		e.m.retries.WithLabelValues(peer).Inc()
		e.log.Info("exchange refused by tunnel; retrying", "exchange", x.id, "peer", peer, "attempt", attempt+1, "err", err)
	}
	switch {
	case x.clientWentAway(ctx):
		keep = false
	case e.abortCtx.Err() != nil:
		keep = x.fail(503, causeShuttingDown, fmt.Errorf("soapgw: exchange aborted: the edge is shutting down and its drain deadline passed"), true)
	case isOutcomeUnknown(lastErr):
		// Its connection died after the request was sent, and the response could not
		// be collected (before the deadline, or the origin no longer holds it).
		e.log.Warn("exchange outcome unknown", "exchange", x.id, "peer", peer, "err", lastErr)
		keep = x.fail(502, causeOutcomeUnknown, fmt.Errorf("soapgw: origin %q: %w", peer, lastErr), true)
	case isTimeout(lastErr) || ctx.Err() != nil:
		keep = x.fail(504, causeTimeout, fmt.Errorf("soapgw: no response from origin %q: the exchange ended because %s", peer, x.clock.reason()), true)
	case isRetryable(lastErr):
		keep = x.fail(503, causeOriginDown, fmt.Errorf("soapgw: origin %q unavailable: %w", peer, lastErr), !replayable)
	default:
		keep = x.fail(502, causeTunnelLost, fmt.Errorf("soapgw: tunnel to origin %q failed mid-exchange: %w", peer, lastErr), true)
	}
	return nil, nil, nil, nil, keep
}

// respond relays the server's response to the client and records the exchange.
func (e *Edge) respond(x *exchange, sbr *bufio.Reader, resp *responseHead) bool {
	faultCode := ""
	if resp.Status >= 500 {
		// Look at the start of the body (a fault is small; the bytes are needed next
		// anyway), so the outcome does not depend on how the frames were cut.
		b, _ := sbr.Peek(faultPeekLen(resp.ContentLength, sbr.Buffered()))
		if faultCode = faultCodeOf(b); faultCode != "" {
			e.m.fault("edge", x.route.Upstream, "server", faultCode)
		}
	}
	keep, err := e.writeResponse(x.bw, sbr, x.req, resp)
	outcome := serverOutcome(resp.Status, faultCode)
	if errors.Is(err, errResponseTooLarge) {
		// Nothing reached the client yet: it can get a proper fault.
		return x.fail(502, causeResponseLarge, err, true)
	}
	if err != nil {
		// Part of the response may be with the client already: the only honest signal
		// left is to abort the connection so the client cannot take a truncated or
		// unverified message for a whole one.
		cause := causeTunnelLost
		if isOutcomeUnknown(err) {
			cause = causeOutcomeUnknown
		}
		e.gatewayError(x.cc, x.id, x.route.Upstream, cause, err)
		abort(x.cc.Conn)
		outcome = "gateway_error"
		keep = false
	}
	e.m.exchange("edge", x.route.Upstream, x.op, resp.Status, outcome, time.Since(x.start))
	return keep && !e.isDraining()
}

// faultWriteTimeout bounds writing a gateway fault to the client, which may happen after
// the exchange deadline (that is often why there is a fault).
const faultWriteTimeout = 5 * time.Second

var (
	errTooLarge         = errors.New("soapgw: body exceeds limit")
	errResponseTooLarge = errors.New("soapgw: response too large to buffer")
	errClientBody       = errors.New("soapgw: reading client request body")
)

// sendStreamed writes the head then copies a large or chunked body to the stream as it
// arrives, enforcing MaxRequestBytes.
func (e *Edge) sendStreamed(st Stream, head []byte, req *httpwire.Request) error {
	if _, err := st.Write(head); err != nil {
		return err
	}
	bufp := copyBufPool.Get().(*[]byte)
	defer copyBufPool.Put(bufp)
	buf := *bufp
	var total int64
	for {
		n, rerr := req.Body.Read(buf)
		if n > 0 {
			total += int64(n)
			if total > e.limits().MaxRequestBytes {
				return errTooLarge
			}
			e.m.addBytes("edge", "client_in", int64(n))
			if _, err := st.Write(buf[:n]); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("%w: %w", errClientBody, rerr)
		}
	}
	if err := st.CloseWrite(); err != nil {
		return &requestEndError{err}
	}
	return nil
}

var copyBufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// writeResponse writes the origin's response to the client. Framing is the only thing it
// may change: a body of unknown length goes chunked to HTTP/1.1 clients, and buffered with
// a Content-Length to HTTP/1.0 clients, so they never wait for a FIN (seed 003 §6.6).
func (e *Edge) writeResponse(bw *bufio.Writer, sbr *bufio.Reader, req *httpwire.Request, resp *responseHead) (keep bool, err error) {
	h := resp.Header
	// While draining, tell the client this is the connection's last response.
	keep = !req.Close && !e.isDraining()
	bodyless := req.Method == "HEAD" || resp.Status == 204 || resp.Status == 304 || resp.Status < 200
	minor := req.ProtoMinor
	var body []byte
	chunked := false
	if !bodyless {
		switch {
		case resp.ContentLength >= 0:
			if !h.Has("Content-Length") {
				h = append(h, httpwire.Field{Name: "Content-Length", Value: strconv.FormatInt(resp.ContentLength, 10)})
			}
		case minor >= 1:
			chunked = true
			h = append(h, httpwire.Field{Name: "Transfer-Encoding", Value: "chunked"})
		default:
			body, err = readAllLimit(sbr, e.limits().MaxResponseBytes)
			if errors.Is(err, errTooLarge) {
				return false, fmt.Errorf("%w: an HTTP/1.0 client needs a Content-Length, and the response is over max_response_bytes (%d)", errResponseTooLarge, e.limits().MaxResponseBytes)
			}
			if err != nil {
				return false, err
			}
			h = append(h, httpwire.Field{Name: "Content-Length", Value: strconv.Itoa(len(body))})
		}
	}
	if minor == 0 && keep {
		h = append(h, httpwire.Field{Name: "Connection", Value: "keep-alive"})
	} else if minor >= 1 && !keep {
		h = append(h, httpwire.Field{Name: "Connection", Value: "close"})
	}
	bp := msgPool.Get().(*[]byte)
	out := httpwire.AppendResponseHead((*bp)[:0], minor, resp.Status, resp.Reason, h)
	if body != nil {
		out = append(out, body...)
	}
	_, err = bw.Write(out)
	*bp = out[:0]
	msgPool.Put(bp)
	if err != nil {
		return false, err
	}
	n := int64(len(out))
	switch {
	case bodyless || body != nil:
		err = drainEOF(sbr)
	case chunked:
		cw := httpwire.NewChunkedWriter(bw)
		var c int64
		c, err = copyFlushing(cw, bw, sbr)
		n += c
		if err == nil {
			err = cw.Close()
		}
	default:
		var c int64
		c, err = copyFlushing(bw, bw, sbr)
		n += c
		if err == nil && c != resp.ContentLength {
			err = fmt.Errorf("soapgw: response body of %d bytes, announced %d", c, resp.ContentLength)
		}
	}
	if err == nil {
		err = bw.Flush()
	}
	e.m.addBytes("edge", "client_out", n)
	return keep, err
}

// copyFlushing copies the stream's message to w, flushing bw whenever the stream has no
// more bytes at hand, so a streamed response reaches the client as it arrives.
func copyFlushing(w io.Writer, bw *bufio.Writer, src *bufio.Reader) (int64, error) {
	bufp := copyBufPool.Get().(*[]byte)
	defer copyBufPool.Put(bufp)
	buf := *bufp
	var n int64
	for {
		k, err := src.Read(buf)
		if k > 0 {
			if _, werr := w.Write(buf[:k]); werr != nil {
				return n, werr
			}
			n += int64(k)
			if src.Buffered() == 0 {
				if ferr := bw.Flush(); ferr != nil {
					return n, ferr
				}
			}
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

func readAllLimit(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: response body over %d bytes", errTooLarge, limit)
	}
	return b, nil
}

// drainEOF reads the rest of a message that should be empty, so the stream's checksum is
// verified and the exchange completes cleanly.
func drainEOF(r io.Reader) error {
	var b [512]byte
	for {
		n, err := r.Read(b[:])
		if n > 0 {
			return fmt.Errorf("%w: unexpected body bytes", errBadEnvelope)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// abort closes a connection with RST instead of FIN, so the peer sees an error rather
// than what could look like the end of a close-delimited message. A TLS connection is
// reset below its TLS layer: a close_notify would tell the client the data ended cleanly.
func abort(c net.Conn) {
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = tc.NetConn()
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func isRetryable(err error) bool {
	var r interface{ Retryable() bool }
	return errors.As(err, &r) && r.Retryable()
}

// isResetByPeer reports whether the other gateway reset the exchange's stream (it
// abandoned the exchange, or stopped reading a request it had answered).
func isResetByPeer(err error) bool {
	var r interface{ ResetByPeer() bool }
	return errors.As(err, &r) && r.ResetByPeer()
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
