package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/soapgw/soapgw/internal/envelope"
)

// Resuming an exchange across a tunnel cut: the edge side (resumer) and the origin side
// (serveResume). held.go says what the origin keeps and for how long.

// outcomeUnknownError ends an exchange whose request may have reached the server and
// whose response could not be collected: the client is told the server may have run it.
type outcomeUnknownError struct{ err error }

func (e *outcomeUnknownError) Error() string {
	return "the server may have executed the request; its response could not be collected: " + e.err.Error()
}
func (e *outcomeUnknownError) Unwrap() error { return e.err }

// Retryable is false whatever the chain holds (a refused resume stream, say): the
// request may have run, so it is never sent again.
func (e *outcomeUnknownError) Retryable() bool { return false }

func isOutcomeUnknown(err error) bool {
	var ou *outcomeUnknownError
	return errors.As(err, &ou)
}

// resumer is the edge's view of an exchange's response once the whole request has been
// written to the tunnel. It reads the response message from the exchange's stream and,
// when the stream fails for any reason other than the exchange's own deadline or a
// corrupted message, opens a new stream to the same origin (on whatever connection is
// up) and asks for the rest: the bytes after those it has already read. Above it the edge
// sees one uninterrupted message. If the origin does not hold the exchange, or the
// deadline passes first, the read fails with an outcomeUnknownError.
type resumer struct {
	ctx    context.Context
	id     string
	opener Opener
	m      *heldMetrics

	st       Stream
	instance string        // what the origin named in the HELLO of the request's connection
	br       *bufio.Reader // over a resumed stream, past the answer's head; nil: read st
	read     int64         // bytes of the response message read so far
	resumes  int
	deadline time.Time
	clock    *progressClock // touched by every read that returns bytes
	broken   error          // the request's end failed: resume before the first read
	stops    []func() bool
	// diverting: the resume collects a response the origin diverted (divert), counted
	// as such.
	diverting bool
}

// maxResumes bounds how often one exchange is resumed: each resume needs a connection
// that died under it, so more than this is a link that never holds. maxResumeTries
// bounds the attempts of one resume whose own stream fails.
const (
	maxResumes     = 8
	maxResumeTries = 4
)

// errNoResumeStream: no connection to the origin came up for a resume.
var errNoResumeStream = errors.New("no tunnel connection to the origin came up within dial_timeout")

func newResumer(ctx context.Context, id string, opener Opener, st Stream, m *heldMetrics) *resumer {
	r := &resumer{ctx: ctx, id: id, opener: opener, st: st, m: m}
	if pi, ok := st.(interface{ PeerInstance() string }); ok {
		r.instance = pi.PeerInstance()
	}
	return r
}

func (r *resumer) Read(p []byte) (int, error) {
	for {
		var n int
		var err error
		switch {
		case r.broken != nil: // the request's end failed: nothing to read here
			err, r.broken = r.broken, nil
		case r.br != nil:
			n, err = r.br.Read(p)
		default:
			n, err = r.st.Read(p)
		}
		r.read += int64(n)
		if n > 0 {
			r.clock.touch()
		}
		if err == nil || err == io.EOF || !r.shouldResume(err) {
			return n, err
		}
		if n > 0 {
			return n, nil // the stream's error is sticky: the next Read resumes
		}
		if rerr := r.resume(err); rerr != nil {
			return 0, rerr
		}
	}
}

// shouldResume: a stream that failed under the exchange, not because the exchange's
// time is up or its bytes are corrupt (those may be with the client already).
func (r *resumer) shouldResume(err error) bool {
	if r.ctx.Err() != nil || isTimeout(err) || isRetryable(err) {
		return false // the deadline; or refused: the origin never had it, the caller retries
	}
	var c interface{ Corrupted() bool }
	return !(errors.As(err, &c) && c.Corrupted())
}

// resume collects the rest of the response on a new stream. Opening one waits for a
// connection to the origin as a new exchange would (the peer's dial_timeout); if none
// comes up, or a resume stream fails maxResumeTries times, the outcome is unknown.
func (r *resumer) resume(cause error) error {
	if r.resumes >= maxResumes {
		r.m.resumes.WithLabelValues("edge", "failed").Inc()
		return &outcomeUnknownError{fmt.Errorf("%w (resumed %d times)", cause, r.resumes)}
	}
	r.resumes++
	// The failed stream is closed only once the origin has answered (or the resume has
	// failed): if it is not dead after all, closing it first would reset it at the
	// origin, which takes a reset for the edge abandoning the exchange and stops it.
	old := r.st
	defer func() { _ = old.Close() }()
	backoff := 50 * time.Millisecond
	for try := 1; ; try++ {
		st, br, err := r.ask()
		if err == nil {
			r.st, r.br = st, br
			result := "ok"
			if r.diverting {
				result = "diverted"
			}
			r.m.resumes.WithLabelValues("edge", result).Inc()
			return nil
		}
		var ou *outcomeUnknownError
		var nd *notDeliveredError
		if errors.As(err, &ou) || errors.As(err, &nd) {
			return err
		}
		if r.ctx.Err() != nil || errors.Is(err, errNoResumeStream) || try >= maxResumeTries {
			r.m.resumes.WithLabelValues("edge", "failed").Inc()
			return &outcomeUnknownError{fmt.Errorf("%w; then %w", cause, err)}
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-r.ctx.Done():
			t.Stop()
		}
		backoff = min(2*backoff, time.Second)
	}
}

// divert collects the response over the other tunnel of a Diverter: the origin answered
// on the exchange's stream that it sends the response there (Origin.divert). That answer
// was not part of the response message, which starts at offset 0 on the new stream. An
// opener that is not a Diverter collects it on a stream of its own (the copy is held
// either way); so do resumes after this one.
func (r *resumer) divert(opener Opener) error {
	r.read, r.br = 0, nil
	r.diverting = true
	defer func() { r.diverting = false }()
	if d, ok := opener.(Diverter); ok {
		own := r.opener
		r.opener = OpenerFunc(d.OpenDiverted)
		defer func() { r.opener = own }()
	}
	return r.resume(errors.New("the origin diverted the response to the TCP tunnel"))
}

// ask opens a stream, sends the resume head and reads the answer's head. An error that
// is not an outcomeUnknownError means: try again on another stream.
func (r *resumer) ask() (Stream, *bufio.Reader, error) {
	st, err := r.opener.OpenStream(r.ctx)
	if err != nil {
		return nil, nil, errNoResumeStream // (err says "not sent, safe to retry": true of the resume, not of the request)
	}
	if !r.deadline.IsZero() {
		_ = st.SetDeadline(r.deadline)
	}
	r.stops = append(r.stops, context.AfterFunc(r.ctx, func() { _ = st.Close() }))
	_, err = st.Write((&envelope.Resume{ExchangeID: r.id, Offset: r.read, Instance: r.instance}).Append(nil))
	if err == nil {
		err = st.CloseWrite()
	}
	var head []byte
	br := bufio.NewReader(st)
	if err == nil {
		head, err = readHead(br, 4096)
	}
	if err != nil {
		_ = st.Close()
		return nil, nil, err
	}
	cont, gwErr, err := envelope.ParseResumeAnswer(head)
	switch {
	case err != nil:
		_ = st.Close()
		return nil, nil, &outcomeUnknownError{fmt.Errorf("origin's answer to a resume: %w", err)}
	case gwErr != nil && gwErr.Cause == resumeNotRun:
		_ = st.Close()
		r.m.resumes.WithLabelValues("edge", "not_run").Inc()
		return nil, nil, &notDeliveredError{gwErr.Message}
	case gwErr != nil:
		_ = st.Close()
		result := "lost"
		if gwErr.Cause == resumeNotHeld {
			result = "not_held"
		}
		r.m.resumes.WithLabelValues("edge", result).Inc()
		return nil, nil, &outcomeUnknownError{errors.New(gwErr.Message)}
	case cont.Offset != r.read:
		_ = st.Close()
		return nil, nil, &outcomeUnknownError{fmt.Errorf("origin resumed at byte %d, the edge has %d", cont.Offset, r.read)}
	}
	return st, br, nil
}

// The rest of Stream: the request is written already, so only Close and SetDeadline
// have work to do.
func (r *resumer) Write([]byte) (int, error) { return 0, errResumerWrite }
func (r *resumer) Flush() error              { return nil }
func (r *resumer) CloseWrite() error         { return nil }
func (r *resumer) Close() error {
	for _, stop := range r.stops {
		stop()
	}
	return r.st.Close()
}
func (r *resumer) SetDeadline(t time.Time) error {
	r.deadline = t
	return r.st.SetDeadline(t)
}

var errResumerWrite = errors.New("soapgw: write on a response reader")

// resumeNotRun is the cause in an origin's answer to a resume for an exchange whose
// request never reached the server whole: it was not executed, and may be sent again.
const resumeNotRun = "not_run"

// notDeliveredError ends a resume whose exchange the origin never ran: the request did
// not reach it whole. Retryable: the edge sends it again (same exchange id) when it still
// has the request.
type notDeliveredError struct{ msg string }

func (e *notDeliveredError) Error() string   { return e.msg }
func (e *notDeliveredError) Retryable() bool { return true }

// responseDiverted is the cause in an origin's answer that sends the exchange's response
// over the edge's TCP tunnel instead (Origin.divert); the edge collects it there with a
// resume at offset 0 (resumer.divert). It never reaches a client.
const responseDiverted = "diverted"

// resumeNotHeld is the cause in an origin's answer to a resume for an exchange it does
// not hold. It never reaches a client: the edge turns it into outcome_unknown.
const resumeNotHeld = "not_held"

// serveResume answers an edge's resume head: the held response's bytes from the offset
// the edge asks for, after a continue head; or an error head when this origin does not
// hold the exchange (then tombstoned: it will not run if its request arrives later) or
// lost its copy.
func (o *Origin) serveResume(ctx context.Context, st Stream, head []byte) {
	res, err := envelope.ParseResume(head)
	if err != nil {
		o.fail(st, time.Now(), "", "", "", &gatewayError{Status: 502, Cause: causeInternal, Message: "soapgw: origin could not read a resume from the tunnel: " + err.Error()}, err)
		return
	}
	if o.held == nil {
		o.answerResume(st, 0, nil, &gatewayError{Status: 502, Cause: resumeNotHeld,
			Message: fmt.Sprintf("soapgw: origin %q keeps no responses (origin.resume_window < 0): the server may have executed exchange %s", o.cfg.Node, res.ExchangeID)})
		return
	}
	if since, ok := o.instance.since(res.Instance); ok && o.held.neverArrived(res.ExchangeID, since) {
		o.held.m.resumes.WithLabelValues("origin", "never_arrived").Inc()
		o.log.Info("resume for an exchange whose request never reached this origin; the edge sends it again", "exchange", res.ExchangeID)
		o.answerResume(st, 0, nil, &gatewayError{Status: 502, Cause: resumeNotRun,
			Message: fmt.Sprintf("soapgw: exchange %s never reached origin %q: not run", res.ExchangeID, o.cfg.Node)})
		return
	}
	h := o.held.lookup(res.ExchangeID)
	if h == nil {
		o.held.m.resumes.WithLabelValues("origin", "not_held").Inc()
		o.log.Warn("resume for an exchange this origin does not hold", "exchange", res.ExchangeID, "node", o.cfg.Node)
		o.answerResume(st, 0, nil, &gatewayError{Status: 502, Cause: resumeNotHeld,
			Message: fmt.Sprintf("soapgw: origin %q does not hold exchange %s (it restarted, its resume window passed, or another replica has it): the server may have executed the request", o.cfg.Node, res.ExchangeID)})
		return
	}
	h.takeOver()
	wctx, cancel := context.WithTimeout(ctx, o.limits().ExchangeTimeout)
	defer cancel()
	tail, err := h.wait(wctx, res.Offset)
	switch {
	case errors.Is(err, errNotRun):
		o.held.m.resumes.WithLabelValues("origin", "not_run").Inc()
		o.log.Info("resume for an exchange whose request never reached the server whole", "exchange", res.ExchangeID)
		o.answerResume(st, 0, nil, &gatewayError{Status: 502, Cause: resumeNotRun,
			Message: fmt.Sprintf("soapgw: origin %q never sent exchange %s to the server: its request did not arrive whole", o.cfg.Node, res.ExchangeID)})
	case err != nil || tail == nil:
		o.held.m.resumes.WithLabelValues("origin", "lost").Inc()
		why := "its response could not be kept (larger than resume_max_bytes/8, the held budget full, or the exchange failed part-way)"
		if err != nil {
			why = err.Error()
		}
		o.answerResume(st, 0, nil, &gatewayError{Status: 502, Cause: causeOutcomeUnknown,
			Message: fmt.Sprintf("soapgw: origin %q cannot resume exchange %s: %s; the server may have executed the request", o.cfg.Node, res.ExchangeID, why)})
	case h.isDiverted():
		// The edge collects a response this origin sent its way (Origin.divert): the
		// copy goes once the edge acknowledges decoding it (coded answers are).
		o.held.m.resumes.WithLabelValues("origin", "diverted").Inc()
		if ad, ok := st.(DeliveryNotifier); ok {
			ad.AfterDelivered(h.collected)
		}
		o.answerResume(st, res.Offset, tail, nil)
	default:
		o.held.m.resumes.WithLabelValues("origin", "ok").Inc()
		o.log.Info("exchange resumed after its tunnel connection died", "exchange", res.ExchangeID, "offset", res.Offset, "bytes", len(tail))
		o.answerResume(st, res.Offset, tail, nil)
	}
}

// answerResume writes a continue head at offset and tail, or ge.
func (o *Origin) answerResume(st Stream, offset int64, tail []byte, ge *gatewayError) {
	var err error
	if ge != nil {
		_, err = st.Write(ge.Append(nil))
	} else {
		_, err = st.Write((&envelope.Continue{Offset: offset}).Append(nil))
		if err == nil {
			_, err = st.Write(tail)
		}
	}
	if err == nil {
		err = st.CloseWrite()
	}
	if err != nil {
		o.log.Warn("could not answer a resume", "err", err)
	}
}

// serveDuplicate answers a request whose exchange id is already held: the same exchange
// sent twice (a request replayed by something between the gateways, or a bug) runs once,
// and the second copy gets the first one's response, whole.
func (o *Origin) serveDuplicate(ctx context.Context, st Stream, h *heldExchange) {
	o.held.m.resumes.WithLabelValues("origin", "duplicate").Inc()
	o.log.Warn("the same exchange arrived twice; answering the second from the first", "exchange", h.id)
	resp, err := h.wait(ctx, 0)
	if err != nil || resp == nil {
		o.fail(st, time.Now(), h.id, "", "", &gatewayError{Status: 502, Cause: causeOutcomeUnknown,
			Message: fmt.Sprintf("soapgw: exchange %s arrived twice at origin %q; the first ran, and its response cannot be given to the second", h.id, o.cfg.Node)}, err)
		return
	}
	if _, err := st.Write(resp); err == nil {
		_ = st.CloseWrite()
	}
}

// requestEndError is a failure to end a request message whose bytes were all written:
// the origin may have the whole request (the end may have arrived, and an upstream
// given a Content-Length needs no end), so the exchange is resumed, not failed as
// undelivered.
type requestEndError struct{ err error }

func (e *requestEndError) Error() string { return "ending the request message: " + e.err.Error() }
func (e *requestEndError) Unwrap() error { return e.err }

func isRequestEnd(err error) bool {
	var re *requestEndError
	return errors.As(err, &re)
}
