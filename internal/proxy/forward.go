package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/soapgw/soapgw/internal/envelope"
	"github.com/soapgw/soapgw/internal/httpwire"
	"github.com/soapgw/soapgw/internal/ratelog"
	"github.com/soapgw/soapgw/internal/spool"
)

// forwarder delivers the spool's messages to their origins. One goroutine (run) owns
// the queues and the spool's bookkeeping; each delivery runs in a goroutine of its own
// and reports back on results, so a slow server holds one slot, not the forwarder.
//
// Messages are queued by group (peer and upstream) in the order the edge accepted them.
// A peer whose delivery failed is left alone for a backoff (100 ms, doubling up to
// OneWayConfig.RetryMax) and its failed message goes back to the head of its queue, so
// with Ordered (one delivery at a time per group) the order holds across failures.
type forwarder struct {
	e    *Edge
	ow   *OneWayConfig
	warn *ratelog.Limiter

	results chan deliveryResult
	stop    chan struct{} // closed by Edge.Shutdown: no new deliveries

	// Owned by run.
	delivered []uint64  // settled as delivered, to delete from the spool in one commit
	deletedAt time.Time // the last deleteDelivered commit
	next      uint64    // messages with a larger seq have not been queued yet
	queues    map[groupKey]*deliveryQueue
	peers     map[string]*peerBackoff
	running   int
	inFlight  int // bytes of the messages being delivered
}

type groupKey struct{ peer, upstream string }

type deliveryQueue struct {
	seqs []queued // FIFO
	busy int
}

// queued is a message waiting for delivery: its seq and size (for the bytes in flight).
type queued struct {
	seq  uint64
	size int
}

// maxInFlightBytes bounds the bytes of the messages being delivered at once (they are
// read from the spool into memory): with large messages fewer than Deliveries go at once.
const maxInFlightBytes = 32 << 20

type peerBackoff struct {
	wait  time.Duration
	until time.Time
}

type deliveryOutcome int

const (
	outcomeRetry     deliveryOutcome = iota // not delivered this time
	outcomeDelivered                        // the server took it
	outcomeDuplicate                        // the origin had delivered it before
	outcomeRefused                          // the server answered with a Fault or an error status
	outcomeInDoubt                          // an earlier attempt's outcome is unknown
	outcomeGone                             // no longer in the spool (an operator removed it)
)

type deliveryResult struct {
	msg      queued
	accepted time.Time // when the edge acknowledged the message (its spool record)
	group    groupKey
	outcome  deliveryOutcome
	reason   string
	answer   []byte // the server's response (head and the start of the body), for dead letters
}

// maxDeadAnswer bounds the server's answer kept with a dead letter.
const maxDeadAnswer = 64 << 10

func newForwarder(e *Edge, ow *OneWayConfig) *forwarder {
	return &forwarder{
		e: e, ow: ow,
		warn:    ratelog.New(e.log.With("component", "oneway"), 10*time.Second),
		results: make(chan deliveryResult),
		stop:    make(chan struct{}),
		queues:  map[groupKey]*deliveryQueue{},
		peers:   map[string]*peerBackoff{},
	}
}

// run delivers until stop is closed and the deliveries in flight have ended (or ctx,
// the edge's abort context, ends them).
func (f *forwarder) run(ctx context.Context) {
	gauges := time.NewTicker(5 * time.Second)
	defer gauges.Stop()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	deletes := time.NewTimer(time.Hour)
	defer deletes.Stop()
	stopping := false
	stop := f.stop // Shutdown closes it; nil once seen, so the loop does not spin on it
	for {
		if wait := f.deleteDue(stopping); wait > 0 {
			deletes.Reset(wait)
		}
		if !stopping {
			f.load()
			f.dispatch(ctx)
		}
		f.e.m.oneWay.observe(f.ow.Spool.Stats())
		if stopping && f.running == 0 {
			return
		}
		if at, ok := f.nextRetry(); ok && !stopping {
			retry.Reset(time.Until(at))
		} else {
			retry.Stop()
		}
		select {
		case <-stop:
			stopping, stop = true, nil
		case r := <-f.results:
			f.settle(r)
			// Settle the results already waiting too, so their deletes share a commit.
			for more := true; more; {
				select {
				case r := <-f.results:
					f.settle(r)
				default:
					more = false
				}
			}
		case <-f.ow.Spool.Ready():
		case <-retry.C:
		case <-deletes.C:
		case <-gauges.C:
		}
	}
}

// Deleting delivered messages is a spool commit (two fsyncs) that every client's
// acknowledgement would wait behind: they are deleted in batches, every deleteEvery or
// deleteBatch messages, whichever comes first. Deleting late is safe: a message still in
// the spool after a restart goes once more, and the origin answers already_delivered.
const (
	deleteEvery = 50 * time.Millisecond
	deleteBatch = 4096
)

// deleteDue deletes the delivered messages when a batch is due (always when stopping) and
// otherwise returns how long until it is (0: nothing waits).
func (f *forwarder) deleteDue(stopping bool) time.Duration {
	if len(f.delivered) == 0 {
		return 0
	}
	if wait := deleteEvery - time.Since(f.deletedAt); wait > 0 && !stopping && len(f.delivered) < deleteBatch {
		return wait
	}
	f.deleteDelivered()
	f.deletedAt = time.Now()
	return 0
}

// load queues the messages accepted since the last load.
func (f *forwarder) load() {
	err := f.ow.Spool.Pending(f.next, func(m spool.Message) bool {
		g := groupKey{m.Peer, m.Upstream}
		q := f.queues[g]
		if q == nil {
			q = &deliveryQueue{}
			f.queues[g] = q
		}
		q.seqs = append(q.seqs, queued{m.Seq, len(m.Data)})
		f.next = m.Seq
		return true
	})
	if err != nil {
		f.warn.Log(slog.LevelError, "spool_read", "one-way spool unreadable; deliveries wait", "err", err)
	}
}

// dispatch starts deliveries while there are slots, messages, and peers not backing off.
func (f *forwarder) dispatch(ctx context.Context) {
	now := time.Now()
	for g, q := range f.queues {
		if b := f.peers[g.peer]; b != nil && now.Before(b.until) {
			continue
		}
		for len(q.seqs) > 0 && f.running < f.ow.Deliveries && (!f.ow.Ordered || q.busy == 0) &&
			(f.running == 0 || f.inFlight+q.seqs[0].size <= maxInFlightBytes) {
			m := q.seqs[0]
			q.seqs = q.seqs[1:]
			q.busy++
			f.running++
			f.inFlight += m.size
			go func() { f.results <- f.deliver(ctx, m, g) }()
		}
	}
}

// nextRetry is when the first peer with messages waiting ends its backoff.
func (f *forwarder) nextRetry() (time.Time, bool) {
	var at time.Time
	for g, q := range f.queues {
		if len(q.seqs) == 0 {
			continue
		}
		if b := f.peers[g.peer]; b != nil && (at.IsZero() || b.until.Before(at)) {
			at = b.until
		}
	}
	return at, !at.IsZero()
}

// settle records a delivery's result in the spool.
func (f *forwarder) settle(r deliveryResult) {
	f.running--
	f.inFlight -= r.msg.size
	q := f.queues[r.group]
	q.busy--
	b := f.peers[r.group.peer]
	if b == nil {
		b = &peerBackoff{}
		f.peers[r.group.peer] = b
	}
	m := f.e.m.oneWay.deliveries
	var err error
	switch r.outcome {
	case outcomeGone:
		return
	case outcomeDelivered, outcomeDuplicate:
		b.wait, b.until = 0, time.Time{}
		if r.outcome == outcomeDuplicate {
			m.WithLabelValues("duplicate").Inc()
		} else {
			m.WithLabelValues("delivered").Inc()
			f.e.m.oneWay.delay.Observe(time.Since(r.accepted).Seconds())
		}
		f.delivered = append(f.delivered, r.msg.seq)
		return
	case outcomeRefused, outcomeInDoubt:
		result := "refused"
		if r.outcome == outcomeInDoubt {
			result = "in_doubt"
		}
		m.WithLabelValues(result).Inc()
		f.warn.Warn("oneway_"+result, "one-way message not delivered: moved to the dead letters", "peer", r.group.peer, "upstream", r.group.upstream, "seq", r.msg.seq, "reason", r.reason, "kept", *f.ow.DeadLetters)
		if *f.ow.DeadLetters {
			err = f.ow.Spool.Kill(r.msg.seq, r.reason, r.answer)
		} else {
			err = f.ow.Spool.Delete(r.msg.seq)
		}
	default:
		m.WithLabelValues("retry").Inc()
		b.wait = min(max(2*b.wait, 100*time.Millisecond), f.ow.RetryMax)
		b.until = time.Now().Add(b.wait)
		f.warn.Warn("oneway_retry", "one-way delivery failed; the message stays in the spool", "peer", r.group.peer, "upstream", r.group.upstream, "seq", r.msg.seq, "reason", r.reason, "retry_in", b.wait)
		q.seqs = append([]queued{r.msg}, q.seqs...)
		return
	}
	if err != nil && !errors.Is(err, spool.ErrNotFound) {
		// Try again later; a message delivered again is answered already_delivered.
		f.warn.Warn("spool_write", "one-way spool write failed", "seq", r.msg.seq, "err", err)
		b.wait = min(max(2*b.wait, 100*time.Millisecond), f.ow.RetryMax)
		b.until = time.Now().Add(b.wait)
		q.seqs = append([]queued{r.msg}, q.seqs...)
	}
}

// deleteDelivered deletes the messages settled as delivered since the last call, in one
// commit. If it fails they stay in the spool: after a restart they go once more and the
// origin answers already_delivered.
func (f *forwarder) deleteDelivered() {
	if len(f.delivered) == 0 {
		return
	}
	if err := f.ow.Spool.DeleteMany(f.delivered); err != nil {
		f.warn.Warn("spool_write", "one-way spool write failed: delivered messages stay in the spool until the next start (the origin will answer already_delivered)", "messages", len(f.delivered), "err", err)
	}
	f.delivered = f.delivered[:0]
}

// deliver sends one message to its origin and classifies the answer.
func (f *forwarder) deliver(ctx context.Context, q queued, g groupKey) deliveryResult {
	r := deliveryResult{msg: q, group: g}
	msg, err := f.ow.Spool.Get(q.seq)
	if errors.Is(err, spool.ErrNotFound) {
		r.outcome = outcomeGone
		return r
	}
	if err != nil {
		r.reason = err.Error()
		return r
	}
	r.accepted = msg.Accepted
	opener := f.openerFor(g)
	if opener == nil {
		r.reason = fmt.Sprintf("no route to peer %q and upstream %q in the configuration", g.peer, g.upstream)
		return r
	}
	deadline := time.Now().Add(f.e.limits().ExchangeTimeout)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	st, err := openBulk(ctx, opener)
	if err != nil {
		r.reason = fmt.Sprintf("origin %q unreachable: %v", g.peer, err)
		return r
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { _ = st.Close() })
	defer stop()
	_ = st.SetDeadline(deadline)
	if _, err = st.Write(msg.Data); err == nil {
		err = st.CloseWrite()
	}
	if err != nil {
		r.reason = fmt.Sprintf("sending to origin %q: %v", g.peer, err)
		return r
	}
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(st)
	defer func() { br.Reset(nil); readerPool.Put(br) }()
	head, err := readHead(br, f.e.limits().MaxHeaderBytes+4096)
	var resp *responseHead
	var gwErr *gatewayError
	if err == nil {
		resp, gwErr, err = envelope.ParseResponse(head)
	}
	if err != nil {
		r.reason = fmt.Sprintf("answer from origin %q: %v", g.peer, err)
		return r
	}
	if gwErr != nil {
		r.reason = gwErr.Cause + ": " + gwErr.Message
		switch gwErr.Cause {
		case causeAlreadyDelivered:
			r.outcome = outcomeDuplicate
		case causeDeliveryInDoubt:
			r.outcome = outcomeInDoubt
		}
		return r
	}
	switch {
	case resp.Status >= 200 && resp.Status < 300:
		r.outcome = outcomeDelivered
		_ = drainBody(br) // the server's acknowledgement; nobody waits for it
	case oneWayNotTaken(resp.Status):
		r.reason = fmt.Sprintf("server answered %d %s", resp.Status, resp.Reason)
	default:
		r.outcome = outcomeRefused
		body, _ := io.ReadAll(io.LimitReader(br, maxDeadAnswer))
		_ = drainBody(br)
		r.reason = fmt.Sprintf("server answered %d %s", resp.Status, resp.Reason)
		if code := faultCodeOf(body); code != "" {
			r.reason += " (SOAP Fault " + code + ")"
		}
		r.answer = append(httpwire.AppendResponseHead(nil, resp.ProtoMinor, resp.Status, resp.Reason, resp.Header), body...)
	}
	return r
}

// openBulk opens the stream of a delivery from the spool: nobody waits on it.
func openBulk(ctx context.Context, o Opener) (Stream, error) {
	if bo, ok := o.(BulkOpener); ok {
		return bo.OpenBulkStream(ctx)
	}
	st, err := o.OpenStream(ctx)
	if err != nil {
		return nil, err
	}
	if b, ok := st.(BulkStream); ok {
		b.SetBulk()
	}
	return st, nil
}

// drainBody reads the rest of a message (bounded by the stream's deadline), so the
// stream ends cleanly.
func drainBody(r io.Reader) error {
	_, err := io.Copy(io.Discard, r)
	return err
}

// openerFor finds how to reach a group's origin: the first route to that peer and
// upstream (which may carry its own codec), or the peer itself.
func (f *forwarder) openerFor(g groupKey) Opener {
	for _, r := range *f.e.routes.Load() {
		if r.Peer == g.peer && r.Upstream == g.upstream && r.Opener != nil {
			return r.Opener
		}
	}
	if o, ok := f.e.cfg.Peers[g.peer]; ok {
		return o
	}
	return nil
}
