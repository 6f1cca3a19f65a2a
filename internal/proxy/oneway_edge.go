package proxy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/soapgw/soapgw/internal/httpwire"
	"github.com/soapgw/soapgw/internal/spool"
)

// One-way messaging at the edge (seed 000's "Pera"): a request for an operation the
// operator marked one-way is synced to the spool and answered 202 Accepted at once; the
// forwarder (forward.go) delivers it over the tunnel when it can, exactly once with the
// origin's ledger (oneway_origin.go). Everything else stays synchronous.
//
//	client ──► Edge.exchange ── marked one-way? ──no──► roundTrip (synchronous, as before)
//	                                │ yes
//	                                ▼
//	                   spool.Put (fsync) ──► 202 Accepted to the client
//	                                │
//	                   forwarder ── OpenStream, request message (id "ow.<spool>-<seq>")
//	                                ▼
//	                   origin: ledger.Begin (fsync) ─► server ─► ledger.Done (fsync)
//	                                │  answer
//	                                ▼
//	                   spool.Delete, or dead letter (refused / in doubt), or try later

// OneWayConfig turns on one-way messaging at the edge.
type OneWayConfig struct {
	Spool      *spool.Spool
	Operations []OneWayOperation
	// AcceptStatus is the status of the edge's acknowledgement, with an empty body
	// (default 202 Accepted, what WS-I Basic Profile R2750 asks of a one-way operation;
	// 200 for clients that want it, though zeep fails on an empty 200).
	AcceptStatus int
	// Deliveries is how many messages are in flight to the origins at once (default
	// DefaultOneWayDeliveries; at most 32 MiB of them). A link carries at most this many
	// per round trip. The origin runs at most origin.one_way.max_concurrent of them at
	// the server at once (OriginConfig.OneWayConcurrency). Ordered makes it one at a time
	// per upstream, in the order the edge accepted them.
	Deliveries int
	Ordered    bool
	// RetryMax caps the wait between delivery attempts to a peer that failed (default
	// 30 s; the first wait is 100 ms, doubled after each failure).
	RetryMax time.Duration
	// DeadLetters keeps messages the server refused (a Fault or an error status) and those
	// in doubt in the spool for an operator (`soapgw spool`); false drops them (still
	// logged and counted). Default true.
	DeadLetters *bool
}

// DefaultOneWayDeliveries is OneWayConfig.Deliveries when unset: enough not to be what
// limits a GPRS link with 2 % loss (5,000 coded Stress messages, one run each: 36, 53,
// 66, 81, 96 and 116 messages/s delivered with 64, 128, 192, 256, 512 and 1,024 in
// flight; four more runs at 1,024 gave 83-104, 72-90 % of what the link allows, TCP's
// recovery from losses being the limit then), or a 3G one at the rate a 2-core gateway
// delivers. At the stream limit the edge opens more tunnel connections. The server is
// shielded by the origin's own bound, the edge's memory by maxInFlightBytes.
const DefaultOneWayDeliveries = 1024

// OneWayOperation marks requests as one-way. Empty fields match everything; at least one
// of Action and Operation is set.
type OneWayOperation struct {
	PathPrefix string
	// Action is the SOAPAction (SOAP 1.1) or Content-Type action (SOAP 1.2), unquoted,
	// compared exactly.
	Action string
	// Operation is the local name of the first element in the envelope's Body.
	Operation string
}

func (c *OneWayConfig) withDefaults() {
	if c.AcceptStatus == 0 {
		c.AcceptStatus = 202
	}
	if c.Deliveries <= 0 {
		c.Deliveries = DefaultOneWayDeliveries
	}
	if c.RetryMax <= 0 {
		c.RetryMax = 30 * time.Second
	}
	if c.DeadLetters == nil {
		t := true
		c.DeadLetters = &t
	}
}

func (c *OneWayConfig) validate() error {
	if c.Spool == nil {
		return fmt.Errorf("proxy: one-way messaging needs a spool")
	}
	if c.AcceptStatus < 200 || c.AcceptStatus > 299 || c.AcceptStatus == 204 {
		return fmt.Errorf("proxy: one-way accept status %d: use a 2xx status with a body length (202 or 200)", c.AcceptStatus)
	}
	for i, op := range c.Operations {
		if op.Action == "" && op.Operation == "" {
			return fmt.Errorf("proxy: one-way operation %d names neither an action nor an operation", i)
		}
	}
	return nil
}

// isOneWay reports whether a request is for an operation marked one-way. body is the
// whole request body.
func (c *OneWayConfig) isOneWay(target string, h httpwire.Header, body []byte) bool {
	action := SOAPAction(h)
	op := ""
	for i := range c.Operations {
		w := &c.Operations[i]
		if w.PathPrefix != "" && w.PathPrefix != "/" && !strings.HasPrefix(target, w.PathPrefix) {
			continue
		}
		if w.Action != "" && w.Action != action {
			continue
		}
		if w.Operation != "" {
			if op == "" {
				op = firstBodyElement(body)
			}
			if w.Operation != op {
				continue
			}
		}
		return true
	}
	return false
}

// acceptOneWay spools a one-way request (its whole body read) and acknowledges it. It
// returns whether the client connection may carry another request.
func (e *Edge) acceptOneWay(x *exchange, head requestHead, body []byte) bool {
	ow := e.cfg.OneWay
	m, err := ow.Spool.Put(x.route.Peer, x.route.Upstream, func(id string) []byte {
		h := head
		h.ExchangeID = id
		return append(h.Append(nil), body...)
	})
	if err != nil {
		cause, status := causeSpoolError, 503
		msg := fmt.Sprintf("soapgw: one-way message not accepted: the edge could not store it: %v", err)
		if errors.Is(err, spool.ErrFull) {
			cause = causeSpoolFull
			msg = "soapgw: one-way message not accepted: the edge's spool is full (edge.one_way.max_messages / max_bytes) because the origin has not taken the messages before it; try again later"
		}
		e.m.oneWay.rejected.WithLabelValues(cause).Inc()
		return x.fail(status, cause, errors.New(msg), false)
	}
	e.m.oneWay.accepted.WithLabelValues(x.route.Upstream).Inc()
	keep := !x.req.Close && !e.isDraining()
	h := httpwire.Header{
		{Name: "Content-Length", Value: "0"},
		{Name: "X-Soapgw-Message-Id", Value: m.ID},
	}
	if x.req.ProtoMinor == 0 && keep {
		h = append(h, httpwire.Field{Name: "Connection", Value: "keep-alive"})
	} else if x.req.ProtoMinor >= 1 && !keep {
		h = append(h, httpwire.Field{Name: "Connection", Value: "close"})
	}
	out := httpwire.AppendResponseHead(nil, x.req.ProtoMinor, ow.AcceptStatus, reasonPhrase(ow.AcceptStatus), h)
	e.m.addBytes("edge", "client_out", int64(len(out)))
	if _, err := x.bw.Write(out); err != nil {
		return false
	}
	if err := x.bw.Flush(); err != nil {
		return false
	}
	e.m.exchange("edge", x.route.Upstream, x.op, ow.AcceptStatus, "spooled", time.Since(x.start))
	return keep
}

func reasonPhrase(status int) string {
	switch status {
	case 200:
		return "OK"
	case 202:
		return "Accepted"
	}
	return "Status " + strconv.Itoa(status)
}
