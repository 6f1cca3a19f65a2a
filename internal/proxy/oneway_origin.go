package proxy

import (
	"fmt"
	"time"

	"github.com/soapgw/soapgw/internal/ledger"
)

// One-way deliveries at the origin. The edge sends a spooled one-way message as an
// ordinary request whose exchange id is the message id (envelope.OneWayPrefix), the same
// on every attempt. The ledger makes the origin run it at most once per id: claimed
// (synced) before the upstream call, marked delivered (synced) before the server's answer
// goes back to the edge, so an edge that sends it again after any failure is told
// "already_delivered" instead of the server getting it twice.
//
// What the server's answer means for the message:
//
//	2xx, 3xx, 4xx other than 408/429, 500 with a SOAP Fault, other 5xx: taken (done;
//	    the edge keeps refused ones as dead letters)
//	408, 429, 502, 503, 504: not taken (forgotten; the edge tries again later)
//	no answer, the server never got the whole request: not taken (forgotten)
//	no answer after it got the whole request: in doubt (never sent again unless
//	    origin.one_way.in_doubt says redeliver)
//
// "Got the whole request" is made precise by the ledger's "sent" record, written after
// all of the request but its last byte went to the server and before that byte goes
// (package ledger): a server does not run a request it has not got whole.
const (
	causeOneWayOff          = "one_way_off"
	causeAlreadyDelivered   = "already_delivered"
	causeDeliveryInProgress = "delivery_in_progress"
	causeDeliveryInDoubt    = "delivery_in_doubt"
)

// oneWayNotTaken reports the statuses by which a server says it did not take a request
// and it may be sent again.
func oneWayNotTaken(status int) bool {
	switch status {
	case 408, 429, 502, 503, 504:
		return true
	}
	return false
}

// oneWayDelivery is an origin exchange that delivers a one-way message.
type oneWayDelivery struct {
	o       *Origin
	id      string
	sent    bool // MarkSent recorded: the last byte went, or was about to
	settled bool // Done or Forget recorded
}

// markSent runs before the request's last byte goes to the server.
func (d *oneWayDelivery) markSent() error {
	if err := d.o.cfg.Ledger.MarkSent(d.id); err != nil {
		return fmt.Errorf("soapgw: recording one-way message %s as sent: %w", d.id, err)
	}
	d.sent = true
	return nil
}

// beginOneWay claims a one-way message for delivery, or answers the edge why not and
// returns nil.
func (o *Origin) beginOneWay(st Stream, x *originExchange) *oneWayDelivery {
	id := x.id()
	refuse := func(status int, cause, msg string) *oneWayDelivery {
		o.m.oneWayOrigin.WithLabelValues(cause).Inc()
		o.m.exchange("origin", x.upstreamName, x.op, status, "gateway_error", time.Since(x.start))
		o.log.Debug("one-way delivery refused", "message", id, "cause", cause, "err", msg)
		ge := &gatewayError{Status: status, Cause: cause, Message: msg}
		if _, err := st.Write(ge.Append(nil)); err == nil {
			_ = st.CloseWrite()
		}
		return nil
	}
	l := o.cfg.Ledger
	if l == nil {
		o.warnOneWayOff.Warn(causeOneWayOff, "one-way message refused: this origin has no ledger (origin.one_way.ledger); the edge keeps it and tries again", "message", id)
		return refuse(501, causeOneWayOff, fmt.Sprintf("soapgw: origin %q takes no one-way messages: origin.one_way.ledger is not set; the edge keeps the message", o.cfg.Node))
	}
	rec, err := l.Begin(id, o.cfg.RedeliverInDoubt)
	if err != nil {
		o.log.Error("one-way ledger write failed; message not delivered", "message", id, "err", err)
		return refuse(502, causeInternal, fmt.Sprintf("soapgw: origin %q could not record one-way message %s: %v", o.cfg.Node, id, err))
	}
	switch rec.State {
	case ledger.Done:
		return refuse(409, causeAlreadyDelivered, fmt.Sprintf("soapgw: one-way message %s was delivered to the server at %s (status %d); not delivered again", id, rec.Time.UTC().Format(time.RFC3339Nano), rec.Status))
	case ledger.InProgress:
		return refuse(409, causeDeliveryInProgress, fmt.Sprintf("soapgw: one-way message %s is being delivered by another attempt", id))
	case ledger.InDoubt:
		o.log.Warn("one-way message in doubt refused", "message", id, "since", rec.Time)
		return refuse(409, causeDeliveryInDoubt, fmt.Sprintf("soapgw: one-way message %s reached the server at %s but its answer never came back (origin restarted, or the server did not answer); not delivered again", id, rec.Time.UTC().Format(time.RFC3339Nano)))
	}
	return &oneWayDelivery{o: o, id: id}
}

// answered records the server's answer before it goes back to the edge.
func (d *oneWayDelivery) answered(status int) {
	var err error
	result := "delivered"
	if oneWayNotTaken(status) {
		result = "not_taken"
		err = d.o.cfg.Ledger.Forget(d.id)
	} else {
		err = d.o.cfg.Ledger.Done(d.id, status)
	}
	d.settled = true
	if err != nil {
		// The id stays "sending": a redelivery is refused as in doubt, never repeated.
		d.o.log.Error("one-way ledger write failed after the server answered", "message", d.id, "status", status, "err", err)
		result = "ledger_error"
	}
	d.o.m.oneWayOrigin.WithLabelValues(result).Inc()
}

// finish settles a delivery that got no answer from the server: in doubt when the whole
// request may have reached the server, not taken otherwise.
func (d *oneWayDelivery) finish() {
	if d.settled {
		return
	}
	if d.sent {
		d.o.cfg.Ledger.Abandon(d.id)
		d.o.m.oneWayOrigin.WithLabelValues("in_doubt").Inc()
		d.o.log.Warn("one-way message in doubt: sent to the server whole, no answer", "message", d.id)
		return
	}
	if err := d.o.cfg.Ledger.Forget(d.id); err != nil {
		d.o.log.Error("one-way ledger write failed", "message", d.id, "err", err)
	}
	d.o.m.oneWayOrigin.WithLabelValues("not_sent").Inc()
}
