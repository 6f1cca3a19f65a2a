package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/soapgw/soapgw/internal/envelope"
	"github.com/soapgw/soapgw/internal/httpwire"
	"github.com/soapgw/soapgw/internal/ratelog"
)

// Origin serves tunnel streams: it rebuilds each request, sends it to the named upstream
// (and only to a configured one: the origin is not an open proxy) and streams the
// response back.
type Origin struct {
	cfg   OriginConfig
	lim   Limits // as started; MaxConcurrentExchanges sizes inflight. The rest: limits()
	m     *Metrics
	log   *slog.Logger
	pools atomic.Pointer[map[string]*upstreamPool] // by upstream name; swapped by Reconfigure
	cur   atomic.Pointer[Limits]                   // swapped by Reconfigure

	inflight chan struct{}   // semaphore: MaxConcurrentExchanges
	watches  watchesByParent // each tunnel connection's context, watched for its exchanges
	held     *heldStore      // responses kept for edges to collect after a cut; nil: off
	// aheadTokens is the memory budget of responses read ahead of a slow tunnel.
	aheadTokens chan struct{}
	instance    originInstance

	warnOneWayOff *ratelog.Limiter
	warnConnAuth  *ratelog.Limiter // per upstream
	oneWaySlots   chan struct{}    // semaphore: OriginConfig.OneWayConcurrency

	flushDelay time.Duration // cfg.StreamFlushDelay or its default
}

// DefaultStreamFlushDelay is how long the upstream may stay silent in the middle of a
// response of unknown length (chunked or close-delimited, as Axis2, .NET and most Java
// stacks send) before the origin pushes what it holds of it to the client.
//
// Holding the message lets the tunnel code it whole, which is where responses gain most,
// but a flush makes the tunnel send the rest of the message uncoded. A SOAP stack that
// serializes a response at once writes its chunks within a millisecond or two of each
// other, so a pause longer than this means the upstream is streaming or slow, and the
// client should see what is ready. The cost for such a response is at most this much more
// latency for its first bytes.
const DefaultStreamFlushDelay = 30 * time.Millisecond

// streamMaxHoldFactor bounds, as a multiple of the flush delay, how long body bytes of a
// response of unknown length wait for the upstream to pause: an upstream that trickles
// without ever pausing that long is streaming too.
const streamMaxHoldFactor = 8

// NewOrigin returns an origin for the configured upstreams.
func NewOrigin(cfg OriginConfig, m *Metrics, log *slog.Logger) (*Origin, error) {
	if m == nil {
		m = NewMetrics(nil)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lim := cfg.Limits.withDefaults()
	o := &Origin{cfg: cfg, lim: lim, m: m, log: log.With("role", "origin"), inflight: make(chan struct{}, lim.MaxConcurrentExchanges),
		flushDelay: cfg.StreamFlushDelay, instance: newOriginInstance(), aheadTokens: newReadAheadTokens()}
	o.warnOneWayOff = ratelog.New(o.log, time.Minute)
	o.warnConnAuth = ratelog.New(o.log, time.Minute)
	if cfg.OneWayConcurrency <= 0 {
		cfg.OneWayConcurrency = DefaultOneWayConcurrency
	}
	o.oneWaySlots = make(chan struct{}, cfg.OneWayConcurrency)
	if o.flushDelay <= 0 {
		o.flushDelay = DefaultStreamFlushDelay
	}
	if cfg.ResumeWindow >= 0 {
		window := cfg.ResumeWindow
		if window == 0 {
			window = DefaultResumeWindow
		}
		o.held = newHeldStore(window, cfg.ResumeMaxBytes, m.held)
	}
	pools, err := o.newPools(cfg.Upstreams, nil)
	if err != nil {
		return nil, err
	}
	o.pools.Store(&pools)
	o.cur.Store(&lim)
	return o, nil
}

// Close closes idle upstream connections.
func (o *Origin) Close() {
	for _, p := range *o.pools.Load() {
		p.closeIdle()
	}
}

// ServeStream handles one exchange from the edge. It owns st.
func (o *Origin) ServeStream(ctx context.Context, st Stream) {
	defer st.Close()
	start := time.Now()
	end := start.Add(o.limits().ExchangeMaxDuration)
	// The exchange ends when it stalls (limits.exchange_timeout without a byte of it
	// moving on the stream) or at end; then the clock first unblocks the stream (a past
	// deadline), then (below) cancels the exchange's context, which unblocks the
	// upstream call. Its timer is the exchange's only one: no future deadline is set on
	// the stream or the context.
	clock := startProgressClock(o.limits().ExchangeTimeout, end)
	defer clock.stop()
	// st may be wrapped below (a held exchange); closures take tunnelSt or a copy, so that
	// st itself is not captured (a captured variable that changes moves to the heap).
	tunnelSt := st // the stream itself, for watchAbandon
	clock.unblockOnExpire(tunnelSt)
	sbr := readerPool.Get().(*bufio.Reader)
	sbr.Reset(clock.reader(st))
	defer func() { sbr.Reset(nil); readerPool.Put(sbr) }()
	// Whatever answered the exchange (a gateway fault, or the server before it had read
	// the whole request: earlyAnswer), the edge may still be sending the request. Closing
	// the stream with it unread would reset it, and the client's connection would end
	// after the answer. So the rest is read and dropped first, within bounds (after every
	// other deferred step; one read that finds the end when the request was read whole).
	defer discardRefused(tunnelSt, sbr)

	head, err := readHead(sbr, o.limits().MaxHeaderBytes+4096)
	if kind, _ := envelope.KindOf(head); err == nil && kind == envelope.KindResume {
		o.serveResume(ctx, st, head)
		return
	}
	x, ge, err := o.admit(head, err, sbr)
	if ge != nil {
		o.fail(st, start, x.id(), x.upstreamName, x.op, ge, err)
		return
	}
	defer func() { <-o.inflight }()
	x.start, x.deadline, x.clock = start, end, clock
	// The exchange's one context ends when its clock expires (errNoProgress: a stall or
	// end), when the edge abandons it (watchAbandon, below), or with the stream's
	// connection (ctx), except when the exchange outlives that connection.
	ec := o.watches.of(ctx).newExchange(o.held != nil || envelope.IsOneWay(x.req.ExchangeID))
	ctx = ec
	defer ec.end(nil)
	clock.endOnExpire(ec)
	var resumable func() bool // nil: the exchange ends with its stream
	var oneWay *oneWayDelivery
	if envelope.IsOneWay(x.req.ExchangeID) {
		// A one-way delivery from an edge's spool: the ledger, not a held response,
		// makes it safe to send again, so it is never held. It outlives its tunnel
		// connection and even a reset by the edge (no watchAbandon): the server gets it
		// whole and the ledger records the answer, so the edge's next attempt learns it
		// was delivered instead of finding it in doubt. The deadline still bounds it.
		if b, ok := st.(BulkStream); ok {
			b.SetBulk() // the answer to a delivery from a spool: nobody waits on it either
		}
		if oneWay = o.beginOneWay(st, x); oneWay == nil {
			return
		}
		defer oneWay.finish()
		if x.req.ContentLength >= 0 {
			x.beforeLastByte = oneWay.markSent
		}
		// An edge keeps many deliveries in flight to fill a long link; the server gets
		// at most OneWayConcurrency of them at once, the rest wait here.
		select {
		case o.oneWaySlots <- struct{}{}:
			defer func() { <-o.oneWaySlots }()
		case <-ctx.Done():
			o.log.Warn("one-way delivery not sent: no slot before its deadline", "message", x.id(), "max_concurrent", cap(o.oneWaySlots))
			return
		}
	} else if o.held != nil {
		h, how := o.held.begin(x.req.ExchangeID, st)
		switch how {
		case heldDuplicate:
			o.serveDuplicate(ctx, st, h)
			return
		case heldTombstoned:
			o.fail(st, start, x.id(), x.upstreamName, x.op, &gatewayError{Status: 502, Cause: causeOutcomeUnknown,
				Message: fmt.Sprintf("soapgw: exchange %s reached origin %q after its edge had given up on it; not run", x.id(), o.cfg.Node)}, nil)
			return
		}
		hst := &heldStream{Stream: st, h: h}
		defer func() { hst.finish(!x.sent) }()
		st, resumable, x.held = hst, h.resumable, hst
	}
	if oneWay == nil {
		defer watchAbandon(tunnelSt, resumable, ec)()
	}

	// A body the upstream must get with a Content-Length is read whole first: one over
	// the limit is refused before the upstream sees a byte of it, or a connection.
	if !o.readBody(st, x, sbr) {
		return
	}
	var uc *upstreamConn
	if x.affinity = affinityKey(x.req.ExchangeID); x.affinity != "" {
		uc = x.pool.takePinned(x.affinity)
		x.pinned = uc != nil
	}
	if uc == nil {
		uc, err = x.pool.get(ctx)
	}
	if err != nil {
		up := x.pool.up
		if errors.Is(causeOf(ctx), errAbandoned) {
			o.log.Warn("exchange aborted while connecting to the upstream", "exchange", x.id(), "upstream", up.Name, "err", errAbandoned)
			o.m.gatewayErrors.WithLabelValues("origin", causeTunnelLost).Inc()
			return
		}
		o.fail(st, start, x.id(), up.Name, x.op, &gatewayError{Status: 502, Cause: causeUpstreamDown,
			Message: fmt.Sprintf("soapgw: upstream %q (%s) unreachable: %v", up.Name, up.Address, unwrapOp(err))}, err)
		return
	}
	defer func() {
		if uc != nil { // not handed back: the exchange failed part-way
			_ = uc.conn.Close()
		}
	}()
	// When ctx ends (exchange deadline or drain deadline passed, session gone, the edge
	// abandoned the exchange) unblock the upstream call and the stream. A connection
	// interrupted this way is never pooled: it is closed, so the upstream sees the call
	// abandoned. When the exchange's clock ended it (a stall, or the hard bound), the
	// clock has already unblocked the stream with a past deadline, and the stream is
	// left open for the timeout fault (upstreamFailed): closed here, it would be reset
	// under an edge still sending the request, which would report tunnel_lost.
	upConn, cur := uc.conn, st
	abort := ec.hookOnce(func() {
		_ = upConn.SetDeadline(time.Unix(1, 0))
		if !errors.Is(ec.Cause(), errNoProgress) {
			_ = cur.Close()
		}
	})
	defer abort.stop()

	resp, ok := o.callUpstream(ctx, st, x, uc, sbr)
	if !ok {
		return
	}
	if oneWay != nil {
		oneWay.answered(resp.StatusCode)
	}
	if o.relayResponse(ctx, st, x, uc, resp, abort) {
		uc = nil // pooled or closed by relayResponse
	}
}

// divertMinBytes is the smallest response body diverted to the edge's TCP tunnel: a
// response that fits QUIC's first flights (its initial window is about 40 KB) loses
// nothing to the UDP path's loss that a round trip more would win back.
const divertMinBytes = 64 << 10

// divert decides, before the first byte of the response goes out, whether the response
// travels over the edge's TCP tunnel instead of the exchange's own stream (a UDP tunnel
// stream whose path loses packets, and an edge that keeps a TCP tunnel beside it:
// DivertLarge). Then the stream carries only an error head with cause "diverted", and the
// response goes to the held copy alone, which the edge collects over TCP with a resume at
// offset 0 (resume.go). The copy is paid for whole beforehand, so it cannot be dropped
// for the budget half-way. Chunked responses (length unknown) and small ones stay.
func (o *Origin) divert(x *originExchange, resp *httpwire.Response) bool {
	w := x.held
	if w == nil || resp.Chunked || resp.ContentLength < divertMinBytes {
		return false
	}
	if d, ok := w.Stream.(interface{ DivertLarge() bool }); !ok || !d.DivertLarge() {
		return false
	}
	ge := &gatewayError{Status: 502, Cause: responseDiverted,
		Message: fmt.Sprintf("soapgw: origin %q sends the response of exchange %s (%d bytes) over the TCP tunnel", o.cfg.Node, x.id(), resp.ContentLength)}
	if !w.divert(ge.Append(nil), resp.ContentLength+int64(o.limits().MaxHeaderBytes)+4096) {
		return false
	}
	o.m.diverted.WithLabelValues(x.pool.up.Name).Inc()
	return true
}

// armDeadline sets a deadline on the upstream connection of an exchange whose context is
// ctx, unless ctx has ended: then the abort hook (ServeStream) has set a past deadline, or
// is about to, and a later deadline set here must not undo it, which would leave the call
// waiting on the upstream for nobody. (ctx.Err is set before the hook runs, so either this
// sees it, or the hook runs after this.)
func armDeadline(ctx context.Context, set func(time.Time) error, t time.Time) {
	_ = set(t)
	if ctx.Err() != nil {
		_ = set(time.Unix(1, 0))
	}
}

// errAbandoned is the cause of an exchange's context when the edge reset its stream: its
// client went away, or its exchange or drain deadline passed.
var errAbandoned = errors.New("the edge abandoned the exchange (its client went away, or its deadline passed)")

// watchAbandon ends the exchange with errAbandoned (end) when st fails because the edge
// reset it, if st can tell (AfterFail: tunnel and UDP tunnel streams). Without it the
// origin would learn only when it writes the response, and an upstream that takes
// minutes would keep its connection and the exchange's slot all that time for nobody. It
// returns the function that ends the watch.
//
// A stream that failed because its connection died (not reset by the edge) leaves a
// resumable exchange running: the edge will collect its response on another connection
// (held.go). resumable is nil when the exchange is not held.
func watchAbandon(st Stream, resumable func() bool, x ender) (stop func() bool) {
	f, ok := st.(interface{ AfterFail(func()) func() bool })
	if !ok {
		return func() bool { return false }
	}
	// No goroutine per exchange: the callback runs only if the stream fails.
	return f.AfterFail(func() {
		if resumable == nil || !resumable() || resetByEdge(st) {
			x.end(errAbandoned)
		} // else the connection died: the exchange goes on for a resume
	})
}

// resetByEdge reports whether a failed stream was reset by the edge (which abandons the
// exchange) rather than lost with its connection or taken over by a resume.
func resetByEdge(st Stream) bool {
	e, ok := st.(interface{ Err() error })
	if !ok {
		return true // cannot tell: stop, as before resumes
	}
	var rp interface{ ResetByPeer() bool }
	return errors.As(e.Err(), &rp) && rp.ResetByPeer()
}

// readBody reads a chunked request body whole when the upstream gets it with a
// Content-Length (x.body), and refuses a body over limits.max_request_bytes, announced or
// read, before the upstream is called. When it fails it has answered the edge (or logged
// why it could not) and reports false.
func (o *Origin) readBody(st Stream, x *originExchange, sbr *bufio.Reader) bool {
	req, up, limit := x.req, x.pool.up, o.limits().MaxRequestBytes
	if req.ContentLength > limit {
		o.tooLarge(st, x, nil)
		return false
	}
	if req.ContentLength >= 0 || up.streamsChunked() {
		return true
	}
	b, err := readAllLimit(sbr, limit)
	switch {
	case errors.Is(err, errTooLarge):
		o.tooLarge(st, x, err)
		return false
	case err != nil:
		// The request did not arrive whole from the tunnel (edge reset it, checksum).
		o.log.Warn("request from tunnel incomplete; upstream not called", "exchange", req.ExchangeID, "upstream", up.Name, "err", err)
		o.m.gatewayErrors.WithLabelValues("origin", causeTunnelLost).Inc()
		return false
	}
	x.body, x.buffered = b, true
	return true
}

// tooLarge answers a request whose body is over limits.max_request_bytes. ServeStream
// then reads and drops what the edge still sends of it (discardRefused). An edge whose
// own limit is lower stops sending (and answers) first.
func (o *Origin) tooLarge(st Stream, x *originExchange, err error) {
	o.fail(st, x.start, x.req.ExchangeID, x.pool.up.Name, x.op, &gatewayError{Status: 413, Cause: causeTooLarge,
		Message: fmt.Sprintf("soapgw: request body exceeds the limit of %d bytes at origin %q", o.limits().MaxRequestBytes, o.cfg.Node)}, err)
}

// discardRefused reads and drops what the edge still sends of a request (up to
// maxRefusedDrain and for at most refusedDrainTime, a deadline of its own: the exchange
// is over; at once when the stream has failed or the request was read whole). The first read needs
// no buffer of its own. When a bound ends it, the stream's Close resets a request still
// coming: the answer must have left first (awaitSent), and the edge reads it after its
// write fails and relays it, closing the client's connection.
func discardRefused(st Stream, body *bufio.Reader) {
	if _, err := body.Peek(1); err != nil {
		return
	}
	_ = st.SetDeadline(time.Now().Add(refusedDrainTime)) // the exchange is over: only the drain reads
	if _, err := io.CopyN(io.Discard, body, maxRefusedDrain); err != io.EOF {
		awaitSent(st, faultWriteTimeout)
	}
}

// awaitSent waits, at most d, until st's outgoing message has left for the peer, on a
// stream that can tell (the TCP tunnel's, where a reset queued after the message's last
// frames would overtake them; a QUIC stream's two directions end independently).
func awaitSent(st Stream, d time.Duration) {
	as, ok := st.(interface{ AfterSent(func()) })
	if !ok {
		return
	}
	sent := make(chan struct{})
	as.AfterSent(func() { close(sent) })
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-sent:
	case <-t.C:
	}
}

// maxRefusedDrain and refusedDrainTime bound what the origin reads and discards of a
// request body after its answer. Within them the client's whole request is taken and its
// connection stays open for the next call (a LAN moves 64 MiB in under a second). Past
// them the answer must not wait for the rest to cross: on a 1 Mbit/s link 8 MiB take a
// minute, and the server's 413 or 401 would reach the client only then.
const (
	maxRefusedDrain  = 64 << 20
	refusedDrainTime = 2 * time.Second
)

// originExchange is one exchange at the origin, from the request head on.
type originExchange struct {
	req          *requestHead
	op           string // SOAP operation, for metrics
	upstreamName string // as the edge asked, for metrics and faults before pool is known
	pool         *upstreamPool
	start        time.Time
	deadline     time.Time      // hard bound: start + limits.exchange_max_duration
	clock        *progressClock // ends the exchange when it stalls (limits.exchange_timeout)
	body         []byte         // a chunked body read whole (buffered), sent with Content-Length
	buffered     bool
	sent         bool   // the whole request went to the upstream (or it answered before: early)
	early        bool   // the upstream answered before the request's write returned (earlyAnswer)
	affinity     string // the client connection's affinity key ("": none; connauth.go)
	pinned       bool   // the upstream connection was pinned to affinity
	bound        bool   // the exchange authenticated its upstream connection (connectionAuth)
	// beforeLastByte, when set (one-way deliveries), runs after all but the last byte of
	// a request with a Content-Length went to the upstream; an error stops the request.
	beforeLastByte func() error
	held           *heldStream // the response's stream when it is held for resumes
	// The response's way into the tunnel (relayResponse), here to be allocated with x.
	busy  busyStream
	ahead readAhead
	// bodyHead is the request body but its last byte, on its way to the upstream
	// (sendRequest), here for the same reason.
	bodyHead io.LimitedReader
}

func (x *originExchange) id() string {
	if x.req == nil {
		return ""
	}
	return x.req.ExchangeID
}

// admit parses the request head (read by ServeStream, err its read error), takes an
// in-flight slot and finds the upstream's pool. On success the caller releases the slot; otherwise a gateway error
// says why (with the exchange as far as it was read).
func (o *Origin) admit(head []byte, err error, sbr *bufio.Reader) (*originExchange, *gatewayError, error) {
	x := &originExchange{}
	if err == nil {
		x.req, err = envelope.ParseRequest(head)
	}
	if err != nil {
		return x, &gatewayError{Status: 502, Cause: causeInternal, Message: "soapgw: origin could not read the request from the tunnel: " + err.Error()}, err
	}
	x.upstreamName = x.req.Upstream
	// The operation name comes from the head or from what of the body is already here.
	buffered, _ := sbr.Peek(sbr.Buffered())
	x.op = operationOf(x.req.Header, buffered)
	select {
	case o.inflight <- struct{}{}:
	default:
		return x, &gatewayError{Status: 503, Cause: causeOverloaded,
			Message: fmt.Sprintf("soapgw: origin %q overloaded: %d exchanges in flight", o.cfg.Node, o.lim.MaxConcurrentExchanges)}, nil
	}
	if x.pool = (*o.pools.Load())[x.req.Upstream]; x.pool == nil {
		<-o.inflight
		return x, &gatewayError{Status: 502, Cause: causeUnknownUpstream,
			Message: fmt.Sprintf("soapgw: upstream %q is not configured at origin %q", x.req.Upstream, o.cfg.Node)}, nil
	}
	return x, nil, nil
}

// callUpstream sends the request to the upstream and reads the final response head. When
// it fails it has answered the edge (or logged why it could not) and reports !ok.
func (o *Origin) callUpstream(ctx context.Context, st Stream, x *originExchange, uc *upstreamConn, sbr *bufio.Reader) (resp *httpwire.Response, ok bool) {
	req, up := x.req, x.pool.up
	lim := httpwire.Limits{MaxHeaderBytes: o.limits().MaxHeaderBytes}
	var early *earlyAnswer // a request that may block its write: its answer is read meanwhile
	if x.watchesEarly() {
		early = watchEarlyAnswer(uc, req.Method, lim)
	}
	err := o.sendRequest(ctx, uc, x, sbr)
	x.early = early != nil && early.written()
	x.sent = err == nil
	if err != nil && !x.early {
		if early != nil {
			early.stop() // the connection is closed, not pooled
		}
		if errors.Is(err, errTooLarge) {
			o.tooLarge(st, x, err) // streamed chunked (chunked: true): cut without its last chunk
			return nil, false
		}
		if !errors.Is(err, errUpstreamWrite) {
			// The request did not arrive whole from the tunnel (edge reset it, checksum):
			// the upstream got an incomplete request and the connection is dropped.
			o.log.Warn("request from tunnel incomplete; upstream call aborted", "exchange", req.ExchangeID, "upstream", up.Name, "err", err)
			o.m.gatewayErrors.WithLabelValues("origin", causeTunnelLost).Inc()
			return nil, false
		}
		// The upstream may have answered early and closed (e.g. 413): try to read it.
		o.log.Debug("upstream write failed; reading any early response", "exchange", req.ExchangeID, "err", err)
	}

	if up.ResponseTimeout > 0 {
		// Otherwise no deadline: the progress clock bounds the wait (on a stall or at the
		// hard bound the abort hook gives the connection a past deadline).
		armDeadline(ctx, uc.conn.SetReadDeadline, responseDeadline(up, time.Now(), x.deadline))
		uc.armed = true
	}
	if early != nil {
		resp, err = early.wait()
	} else {
		resp, err = readFinalHead(uc.br, req.Method, lim)
	}
	if err != nil {
		o.upstreamFailed(ctx, st, x, err)
		return nil, false
	}
	if x.early {
		// The upstream answered before it had the whole request (and stopped reading
		// it): its answer goes to the client as any other, the rest of the request is
		// read from the tunnel and dropped (ServeStream), and the connection, in the
		// middle of a request, is closed. The request was not run whole, but the server
		// did see it: if the answer is lost on the way, its outcome is unknown, never
		// "not run".
		o.log.Debug("upstream answered before the request was written whole", "exchange", req.ExchangeID, "upstream", up.Name, "status", resp.StatusCode)
		x.sent = true
		resp.Close = true
	}
	if x.bound = connectionAuth(req.Header, resp.Header); x.bound && x.affinity == "" {
		// Never back to the shared pool (connectionAuth), and no key to pin it to: an
		// edge that predates connection affinity.
		resp.Close = true
		o.warnConnAuth.Warn(up.Name, "upstream authenticates connections (NTLM or Negotiate) and the edge sends no connection affinity: each such connection is closed after its exchange, never shared; a handshake of several requests (NTLM) cannot complete", "upstream", up.Name, "status", resp.StatusCode)
	}
	if resp.StatusCode == 101 {
		o.fail(st, x.start, req.ExchangeID, up.Name, x.op, &gatewayError{Status: 502, Cause: causeUpstreamBad,
			Message: fmt.Sprintf("soapgw: upstream %q switched protocols, which a SOAP gateway cannot carry", up.Name)}, nil)
		return nil, false
	}
	return resp, true
}

// responseDeadline is when the origin stops waiting for the response head of a request
// sent at sent: the exchange deadline, or the upstream's response_timeout after sent if
// it has one (Upstream.ResponseTimeout > 0) that ends sooner. By default an upstream has
// none, so a server may take as long as the exchange deadline allows (its client,
// through the edge, decides how long it waits).
func responseDeadline(up Upstream, sent, exchangeDeadline time.Time) time.Time {
	if up.ResponseTimeout > 0 {
		if t := sent.Add(up.ResponseTimeout); t.Before(exchangeDeadline) {
			return t
		}
	}
	return exchangeDeadline
}

// upstreamFailed answers an exchange whose upstream gave no response head: a timeout, a
// bad response, or an abort that is not the upstream's fault.
func (o *Origin) upstreamFailed(ctx context.Context, st Stream, x *originExchange, err error) {
	req, up := x.req, x.pool.up
	stalled := errors.Is(causeOf(ctx), errNoProgress) || errors.Is(ctx.Err(), context.DeadlineExceeded)
	if !stalled && errors.Is(ctx.Err(), context.Canceled) {
		// Not the upstream's fault: the exchange was aborted (its tunnel session
		// died, the drain deadline passed, the edge abandoned it) and its upstream
		// call interrupted; the upstream sees its connection closed.
		o.log.Warn("exchange aborted while waiting for the upstream; upstream connection closed", "exchange", req.ExchangeID, "upstream", up.Name, "err", causeOf(ctx))
		o.m.gatewayErrors.WithLabelValues("origin", causeTunnelLost).Inc()
		o.m.exchange("origin", up.Name, x.op, 502, "gateway_error", time.Since(x.start))
		return
	}
	ge := &gatewayError{Status: 502, Cause: causeUpstreamBad,
		Message: fmt.Sprintf("soapgw: upstream %q (%s) failed: %v", up.Name, up.Address, unwrapOp(err))}
	switch {
	case stalled || (errors.Is(err, os.ErrDeadlineExceeded) && up.ResponseTimeout <= 0):
		// Without a response_timeout the read deadline is the exchange's hard bound; it
		// may fire an instant before ctx's timer does.
		ge = &gatewayError{Status: 504, Cause: causeTimeout,
			Message: fmt.Sprintf("soapgw: upstream %q gave no answer before the exchange ended: %s", up.Name, x.clock.reason())}
		// The clock gave the stream a past deadline: the fault, and the rest of a request
		// the edge is still sending (discardRefused), get a bound of their own.
		_ = st.SetDeadline(time.Now().Add(faultWriteTimeout))
	case errors.Is(err, os.ErrDeadlineExceeded):
		ge = &gatewayError{Status: 504, Cause: causeUpstreamTimeout,
			Message: fmt.Sprintf("soapgw: upstream %q (%s) did not answer within %s", up.Name, up.Address, up.ResponseTimeout)}
	}
	o.fail(st, x.start, req.ExchangeID, up.Name, x.op, ge, err)
}

// relayResponse streams the upstream's response into the tunnel and records the
// exchange. It reports whether it took care of uc (pooled or closed); abort.stop detaches
// the abort hook, and fails if the abort already ran (then uc is not pooled).
func (o *Origin) relayResponse(ctx context.Context, st Stream, x *originExchange, uc *upstreamConn, resp *httpwire.Response, abort ctxHookRef) (handled bool) {
	req, up := x.req, x.pool.up
	// The response's reads are bounded by the exchange's progress clock (and its hard
	// bound, which the clock keeps too); the read deadline of callUpstream, if any, was
	// for the head.
	if uc.armed {
		armDeadline(ctx, uc.conn.SetReadDeadline, time.Time{})
		uc.armed = false
	}
	faultCode := ""
	if resp.StatusCode >= 500 {
		b, _ := uc.br.Peek(faultPeekLen(resp.ContentLength, uc.br.Buffered()))
		faultCode = faultCodeOf(b)
	}
	// Writes into the tunnel are the exchange's progress, and blocking in one is not a
	// stall (progressClock); a tunnel slower than the upstream gets the response from
	// memory while the upstream is read at its own pace (readAhead).
	if o.divert(x, resp) {
		o.log.Debug("large response diverted to the edge's TCP tunnel", "exchange", req.ExchangeID, "upstream", up.Name, "bytes", resp.ContentLength)
	}
	x.busy = busyStream{st, x.clock}
	x.ahead = readAhead{Stream: &x.busy, tokens: o.aheadTokens, clock: x.clock, gauge: o.m.readAhead}
	ra := &x.ahead
	n, err := o.sendResponse(ra, uc, resp)
	o.m.addBytes("origin", "server_in", int64(responseHeadLen(resp))+n)
	if err == nil {
		// The upstream's part is done: hand its connection back before the last frame
		// goes out, so the next exchange (often already on its way) finds it idle.
		switch keep := !resp.Close && abort.stop(); {
		case keep && x.affinity != "" && (x.bound || x.pinned):
			x.pool.pin(x.affinity, uc) // its client's alone (connauth.go)
		case keep && up.PoolSize > 0 && !x.bound:
			x.pool.put(uc)
		default:
			_ = uc.conn.Close()
		}
		handled = true
		if err = ra.finish(); err == nil {
			err = st.CloseWrite()
		}
	} else {
		_ = ra.finish()
	}
	if err != nil {
		o.log.Warn("response not delivered whole; stream reset", "exchange", req.ExchangeID, "upstream", up.Name, "err", err)
		o.m.gatewayErrors.WithLabelValues("origin", causeUpstreamBad).Inc()
		o.m.exchange("origin", up.Name, x.op, resp.StatusCode, "gateway_error", time.Since(x.start))
		return handled // the caller's st.Close resets the unfinished stream: the edge aborts the client
	}
	if faultCode != "" {
		o.m.fault("origin", up.Name, "server", faultCode)
	}
	o.m.exchange("origin", up.Name, x.op, resp.StatusCode, serverOutcome(resp.StatusCode, faultCode), time.Since(x.start))
	if o.log.Enabled(ctx, slog.LevelDebug) { // its arguments cost 5 allocations an exchange
		o.log.Debug("exchange", "exchange", req.ExchangeID, "upstream", up.Name, "method", req.Method, "target", req.Target, "status", resp.StatusCode, "duration", time.Since(x.start))
	}
	return true
}

func (o *Origin) fail(st Stream, start time.Time, id, upstream, op string, ge *gatewayError, err error) {
	o.m.gatewayErrors.WithLabelValues("origin", ge.Cause).Inc()
	o.m.exchange("origin", upstream, op, ge.Status, "gateway_error", time.Since(start))
	o.log.Warn("gateway error", "exchange", id, "upstream", upstream, "cause", ge.Cause, "status", ge.Status, "err", ge.Message)
	if _, werr := st.Write(ge.Append(nil)); werr == nil {
		_ = st.CloseWrite()
	}
}

func unwrapOp(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		var sys *os.SyscallError
		if errors.As(op.Err, &sys) {
			return sys.Err
		}
		return op.Err
	}
	return err
}

var errUpstreamWrite = errors.New("writing to upstream")

// streamsChunked reports whether a request body of unknown length is streamed to this
// upstream with chunked framing: only when the operator says it accepts chunked bodies
// (chunked: true) and it speaks HTTP/1.1. Otherwise the origin reads the body whole and
// sends it with a Content-Length, which every HTTP/1.x server understands, from the
// first call on: an HTTP/1.0 server, or a 1.1 one in front of a stack that only reads
// Content-Length (common for old SOAP servers), would otherwise fail the call.
func (u *Upstream) streamsChunked() bool { return u.Chunked && !u.HTTP10 }

// sendRequest writes the request to the upstream: the head as the client sent it (minus
// hop-by-hop fields), then the body with the framing the upstream accepts: x.body with a
// Content-Length when readBody read it whole, chunked when the upstream takes chunked
// bodies (streamsChunked), as the client framed it otherwise.
func (o *Origin) sendRequest(ctx context.Context, uc *upstreamConn, x *originExchange, body *bufio.Reader) error {
	up, req := uc.pool.up, x.req
	h := req.Header
	if up.RewriteHost {
		h = h.Clone()
		for i := range h {
			if equalFold(h[i].Name, "Host") {
				h[i].Value = up.Address
			}
		}
	}
	minor := 1
	// An HTTP/1.0 request without Host is valid as 1.0 but not as 1.1 (RFC 9112 §3.2: the
	// server must answer 400). Forward it as the client sent it rather than invent a Host.
	if up.HTTP10 || (req.ProtoMinor == 0 && !h.Has("Host")) {
		minor = 0
		h = append(h, httpwire.Field{Name: "Connection", Value: "keep-alive"})
	}
	buffered := x.buffered
	chunked := req.ContentLength < 0 && !buffered
	switch {
	case buffered:
		h = append(h, httpwire.Field{Name: "Content-Length", Value: strconv.Itoa(len(x.body))})
	case chunked:
		h = append(h, httpwire.Field{Name: "Transfer-Encoding", Value: "chunked"})
	}
	// No write deadline: the progress clock bounds the request's writes as every other
	// leg (a stall or the hard bound ends the exchange, and its abort hook gives the
	// connection a past deadline). A deadline per exchange cost two timer updates.
	mp := msgPool.Get().(*[]byte)
	out := httpwire.AppendRequestHead((*mp)[:0], req.Method, req.Target, minor, h)
	var after []byte // the buffered body, written after out when both fit the writer's buffer
	if buffered {
		if len(out)+len(x.body) <= uc.bw.Available() {
			after = x.body
		} else {
			out = append(out, x.body...) // one system call for head and body
		}
	}
	_, err := uc.bw.Write(out)
	if err == nil && after != nil {
		_, err = uc.bw.Write(after)
	}
	n := int64(len(out) + len(after))
	putMsgBuf(mp, out)
	if err != nil {
		return fmt.Errorf("%w: %w", errUpstreamWrite, err)
	}
	switch {
	case buffered:
		err = drainEOF(body)
	case chunked:
		// Streamed as it arrives; the limit still holds. A body that passes it stops
		// here without its last chunk, so the upstream never takes what it got for a
		// whole request (its connection is closed).
		cw := httpwire.NewChunkedWriter(uc.bw)
		var c int64
		c, err = copyBody(cw, io.LimitReader(body, o.limits().MaxRequestBytes+1))
		n += c
		if err == nil && c > o.limits().MaxRequestBytes {
			err = fmt.Errorf("%w: request body over %d bytes", errTooLarge, o.limits().MaxRequestBytes)
		}
		if err == nil {
			err = cw.Close()
		}
	default:
		// The body's last byte goes to the upstream only after the tunnel message has
		// ended (its checksum verified): an upstream never gets the whole of a request
		// that did not arrive whole, so one whose exchange ends unsent was provably not
		// run (a resume is told not_run; held.go). A one-way delivery records that its
		// last byte is going first (beforeLastByte, oneway_origin.go).
		var c int64
		head := max(req.ContentLength-1, 0)
		x.bodyHead = io.LimitedReader{R: body, N: head}
		c, err = copyBody(uc.bw, &x.bodyHead)
		x.bodyHead.R = nil // body is a pooled reader: x may outlive it (a held exchange)
		if err == nil && c == head && x.beforeLastByte != nil {
			if ferr := uc.bw.Flush(); ferr != nil {
				err = fmt.Errorf("%w: %w", errUpstreamWrite, ferr)
			} else {
				err = x.beforeLastByte()
			}
		}
		if err == nil {
			var last int64
			last, err = copyBody(holdWriter{uc.bw}, body)
			c += last
		}
		n += c
		if err == nil && c != req.ContentLength {
			err = fmt.Errorf("%w: request body of %d bytes, announced %d", errBadEnvelope, c, req.ContentLength)
		}
	}
	o.m.addBytes("origin", "server_out", n)
	if err != nil {
		return err
	}
	if err := uc.bw.Flush(); err != nil {
		return fmt.Errorf("%w: %w", errUpstreamWrite, err)
	}
	return nil
}

// holdWriter writes into a bufio.Writer's buffer without ever writing through, so what
// it is given stays in the process until the next Flush (the request's last byte, until
// the tunnel message has ended).
type holdWriter struct{ bw *bufio.Writer }

func (w holdWriter) Write(p []byte) (int, error) {
	for i := range p {
		if err := w.bw.WriteByte(p[i]); err != nil {
			return i, fmt.Errorf("%w: %w", errUpstreamWrite, err)
		}
	}
	return len(p), nil
}

// copyBody copies the tunnel message to the upstream. Errors reading the stream come back
// unwrapped; errors writing carry errUpstreamWrite so the caller can tell them apart.
func copyBody(w io.Writer, r io.Reader) (int64, error) {
	bufp := copyBufPool.Get().(*[]byte)
	defer copyBufPool.Put(bufp)
	buf := *bufp
	var n int64
	for {
		k, err := r.Read(buf)
		if k > 0 {
			if _, werr := w.Write(buf[:k]); werr != nil {
				return n, fmt.Errorf("%w: %w", errUpstreamWrite, werr)
			}
			n += int64(k)
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// sendResponse streams the upstream's response into the tunnel. The caller ends the
// message with CloseWrite once the upstream connection is released.
//
// A response of known length is never flushed: the tunnel sends full frames as they fill,
// and a message left whole can be coded. A response of unknown length (chunked or
// close-delimited) is held too while the upstream keeps sending, so that one produced at
// once is coded like any other. It is flushed only when the client would otherwise wait on
// body bytes the origin holds: when the upstream has been silent for the flush delay (a
// timer armed around each read of the upstream while body bytes are held), or when body
// bytes have been held for streamMaxHoldFactor times the delay and the upstream has
// nothing more at hand (an upstream trickling without pauses). A flush makes the tunnel
// stream the rest of the message (coded as it goes where the gateways can, else
// uncoded), so from then on what the origin holds is pushed whenever the upstream has
// nothing more at hand.
func (o *Origin) sendResponse(st Stream, uc *upstreamConn, resp *httpwire.Response) (int64, error) {
	head := responseHead{
		Status:        resp.StatusCode,
		Reason:        resp.Reason,
		ProtoMinor:    resp.ProtoMinor,
		ContentLength: resp.ContentLength,
		Header:        httpwire.EndToEnd(resp.Header),
	}
	if resp.Chunked {
		head.ContentLength = -1
	}
	mp := msgPool.Get().(*[]byte)
	hb := head.Append((*mp)[:0])
	_, err := st.Write(hb) // a Stream copies what it is given
	putMsgBuf(mp, hb)
	if err != nil {
		return 0, err
	}
	bufp := copyBufPool.Get().(*[]byte)
	defer copyBufPool.Put(bufp)
	buf := *bufp
	var (
		n         int64
		fl        *idleFlusher
		streaming bool      // flushed once: the message goes uncoded, push every lull
		heldSince time.Time // when the oldest body bytes not pushed yet were written; zero: none
	)
	maxHold := streamMaxHoldFactor * o.flushDelay
	if resp.ContentLength < 0 {
		upConn := uc.conn
		fl = &idleFlusher{st: st, fired: make(chan error, 1), abort: func() {
			// The stream is gone: stop waiting on the upstream.
			_ = upConn.SetReadDeadline(time.Unix(1, 0))
		}}
	}
	for {
		armed := false
		if fl != nil && !heldSince.IsZero() {
			held := time.Since(heldSince)
			switch {
			case uc.br.Buffered() == 0 && (streaming || held >= maxHold):
				// The next read waits on the upstream: push what we hold first.
				if err := st.Flush(); err != nil {
					return n, err
				}
				streaming, heldSince = true, time.Time{}
			case streaming:
				// Only framing is buffered (a chunk's CRLF, part of a chunk-size line):
				// the next read may still wait on the upstream.
				fl.arm(streamingLull)
				armed = true
			case held < maxHold:
				fl.arm(min(o.flushDelay, maxHold-held))
				armed = true
			default:
				fl.arm(o.flushDelay)
				armed = true
			}
		}
		k, err := resp.Body.Read(buf)
		if armed {
			// Every return below comes after this: the timer never outlives the response,
			// and its Flush never runs while this goroutine writes to st.
			fired, ferr := fl.disarm()
			if ferr != nil {
				return n, ferr
			}
			if fired {
				streaming, heldSince = true, time.Time{}
			}
		}
		if k > 0 {
			if _, werr := st.Write(buf[:k]); werr != nil {
				return n, werr
			}
			n += int64(k)
			if fl != nil && heldSince.IsZero() {
				heldSince = time.Now()
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

// streamingLull is how long the origin waits, in a response it already streams uncoded,
// before it pushes the body bytes it holds when what it has buffered from the upstream is
// framing only (a chunk's CRLF, part of a chunk-size line): the upstream is likely silent,
// but the read may also complete at once, and then one frame carries more.
const streamingLull = time.Millisecond

// idleFlusher flushes a stream from a timer while sendResponse waits on the upstream. It
// is armed only just before a read of the upstream and disarmed as soon as the read
// returns, before anything else is written to the stream, so its Flush never runs
// concurrently with a Write of the same stream. If the Flush fails, abort unblocks the
// read.
type idleFlusher struct {
	st    Stream
	abort func()
	t     *time.Timer
	fired chan error // the timer's Flush result; buffered, so the timer never blocks
}

func (f *idleFlusher) arm(d time.Duration) {
	if f.t == nil {
		f.t = time.AfterFunc(d, f.flush)
		return
	}
	f.t.Reset(d)
}

func (f *idleFlusher) flush() {
	err := f.st.Flush()
	if err != nil {
		f.abort()
	}
	f.fired <- err
}

// disarm stops the timer armed last. If it had fired already, disarm waits for its Flush
// to return and reports its result.
func (f *idleFlusher) disarm() (fired bool, err error) {
	if f.t.Stop() {
		return false, nil
	}
	return true, <-f.fired
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i]|0x20, b[i]|0x20
		if x != y {
			return false
		}
	}
	return true
}

// upstreamPool keeps idle keep-alive connections to one upstream.
type upstreamPool struct {
	up  Upstream
	tls *tls.Config // nil: plain HTTP (up.TLS.clientConfig)
	m   *Metrics

	mu      sync.Mutex
	idle    []*upstreamConn
	pins    map[string]*upstreamConn // idle connections bound to an affinity key (connauth.go)
	retired bool                     // replaced by Reconfigure: connections returned now are closed
}

type upstreamConn struct {
	pool      *upstreamPool
	conn      net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
	probe     *aliveProbe // nil: alive checks with a short read deadline
	armed     bool        // the response_timeout deadline is set (callUpstream until the head)
}

func (p *upstreamPool) get(ctx context.Context) (*upstreamConn, error) {
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		uc := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if time.Since(uc.idleSince) < p.up.IdleTimeout && uc.alive() {
			return uc, nil
		}
		_ = uc.conn.Close()
	}
	return p.dial(ctx)
}

// alive reports whether an idle connection is still open: a server that closed it (idle
// timeout) has left an EOF to read. Sending a request into such a connection would race
// with the close and could not be retried safely, so it is checked before reuse.
func (uc *upstreamConn) alive() bool {
	if uc.br.Buffered() > 0 {
		return false // unsolicited bytes: protocol confusion
	}
	if ok, known := uc.probe.check(); known {
		return ok
	}
	_ = uc.conn.SetReadDeadline(time.Now().Add(time.Millisecond / 10))
	_, err := uc.br.Peek(1)
	_ = uc.conn.SetReadDeadline(time.Time{})
	return errors.Is(err, os.ErrDeadlineExceeded)
}

func (p *upstreamPool) dial(ctx context.Context) (*upstreamConn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.up.ConnectTimeout)
	defer cancel()
	d := net.Dialer{KeepAlive: 30 * time.Second}
	c, err := d.DialContext(ctx, "tcp", p.up.Address)
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if p.tls != nil {
		tc := tls.Client(c, p.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("tls handshake: %w", err)
		}
		c = tc
	}
	p.m.upstreamConns.WithLabelValues(p.up.Name).Inc()
	return &upstreamConn{pool: p, conn: c, br: bufio.NewReaderSize(c, 16<<10), bw: bufio.NewWriterSize(c, 16<<10), probe: newAliveProbe(c)}, nil
}

func (p *upstreamPool) put(uc *upstreamConn) {
	uc.idleSince = time.Now()
	// Cleared whatever set it: cheap when no deadline is armed (no timer to take out), and
	// a pooled connection must not keep a past one.
	_ = uc.conn.SetDeadline(time.Time{})
	uc.armed = false
	p.mu.Lock()
	if !p.retired && len(p.idle) < p.up.PoolSize {
		p.idle = append(p.idle, uc)
		uc = nil
	}
	p.mu.Unlock()
	if uc != nil {
		_ = uc.conn.Close()
	}
}

// retire closes the idle connections and makes the pool close, not keep, those that
// exchanges still using them give back.
func (p *upstreamPool) retire() {
	p.mu.Lock()
	p.retired = true
	p.mu.Unlock()
	p.closeIdle()
}

func (p *upstreamPool) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	for _, uc := range p.pins {
		idle = append(idle, uc)
	}
	p.pins = nil
	p.notePinsLocked()
	p.mu.Unlock()
	for _, uc := range idle {
		_ = uc.conn.Close()
	}
}
