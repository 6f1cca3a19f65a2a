package quic

import (
	"sync"
	"time"
)

// Tail probes (SPEC.md, "Tail probes").
//
// Without copies, a one-packet message whose packet is lost waits for QUIC's probe
// timeout: smoothed RTT + 4 RTT variance + the peer's 25 ms maximum ack delay, a fixed
// 25 ms quic-go does not let us lower, which makes the UDP tunnel's p99 on a lossy path
// worse than the TCP tunnel's. QUIC's other loss detection is quicker: once a later
// packet is acknowledged, an earlier one sent more than 9/8 RTT before is lost at once.
// So when an edge exchange has had no response head for a little more than a round trip,
// the edge sends one PING control frame: if the request's packet was lost, the PING's
// packet arrives after a gap, the origin acknowledges it at once (quic-go acknowledges
// out-of-order packets immediately), and that acknowledgement makes the edge's QUIC
// declare the request lost and send it again. If the response's packet was lost
// instead, the origin answers the PING with a PING of its own, and the same happens the
// other way. Either way a loss costs about two round trips and a bit, not a round trip
// and a probe timeout. QUIC still does all the resending.
//
// A probe pays only on a short path. Its acknowledgement comes a round trip after it, so
// the loss is known at probeAfter + RTT, while the probe timeout is RTT + 4 deviations +
// 25 ms after the message; and sending the PING (an ack-eliciting packet) re-arms the
// sender's probe timeout from then. So an edge probes only while probeAfter < 4 RTT
// deviations + 25 ms (routed-wlan's 14 ms: yes, 19.5 against 33 ms; 3g's 150 ms: never),
// and an origin answers only under the same condition on its own estimates.
//
// Probes are sent only while some loss is reported (probeLoss) and the exchange's
// request was not copied (copies do the job better), never for bulk messages, and at most
// once per exchange, so a clean path or a slow server costs nothing or one small packet.
const (
	probeLoss   = 0.001                // probes while at least 0.1 % of packets are lost
	probeMargin = 2 * time.Millisecond // beyond a round trip
)

// probeDelay returns when a late exchange is probed on this path, and whether probing
// pays here at all (see above).
func probeDelay(srtt, rttDev time.Duration) (time.Duration, bool) {
	after := probeAfter(srtt, rttDev)
	return after, after < 4*rttDev+maxAckDelay
}

// probeAfter is how long after its request an exchange without a response head gets a
// probe: a little more than a round trip, so a normal response is in by then (5/4 of the
// smoothed RTT, or the RTT and four mean deviations if that is less, as on a long steady
// path), and so at least 1/8 RTT after the request, for its acknowledgement to find the
// request overdue.
func probeAfter(srtt, rttDev time.Duration) time.Duration {
	return min(srtt*5/4, srtt+4*rttDev) + probeMargin
}

// tailProber tracks the edge's exchanges that wait for a response head and sends one
// PING for those that waited probeAfter. One timer per connection, armed for the
// earliest due exchange.
type tailProber struct {
	c       *conn
	mu      sync.Mutex
	timer   *time.Timer // owned; stopped by conn.close
	armed   time.Time   // when timer fires; zero: not armed
	waiting []probeWait // in the order the requests were sent
}

type probeWait struct {
	st  *Stream
	due time.Time
}

func (p *tailProber) init(c *conn) {
	p.c = c
	p.timer = time.AfterFunc(time.Hour, p.fire)
	p.timer.Stop()
}

// sent registers an exchange whose request has just been sent, if it should be probed.
func (p *tailProber) sent(st *Stream, copied bool) {
	if copied || st.bulk || st.server || p.c.loss.lossRatio() < probeLoss {
		return
	}
	stats := p.c.qc.ConnectionStats()
	after, pays := probeDelay(stats.SmoothedRTT, stats.MeanDeviation)
	if !pays {
		return
	}
	due := time.Now().Add(after)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.waiting = append(p.waiting, probeWait{st, due})
	if p.armed.IsZero() {
		p.armed = due
		p.timer.Reset(time.Until(due))
	}
}

// fire sends one PING if an exchange waited past its due time without a response head,
// drops the exchanges that are answered or probed, and re-arms for the next.
func (p *tailProber) fire() {
	now := time.Now()
	p.mu.Lock()
	p.armed = time.Time{}
	probe := false
	keep := p.waiting[:0]
	for _, w := range p.waiting {
		switch {
		case w.st.gotHead.Load() || w.st.released.Load():
		case !w.due.After(now):
			probe = true
		default:
			keep = append(keep, w)
		}
	}
	clear(p.waiting[len(keep):])
	p.waiting = keep
	for _, w := range keep {
		if p.armed.IsZero() || w.due.Before(p.armed) {
			p.armed = w.due
		}
	}
	if !p.armed.IsZero() {
		p.timer.Reset(time.Until(p.armed))
	}
	p.mu.Unlock()
	if probe && p.c.alive() {
		p.c.m.tailProbes.Inc()
		p.c.sendCtrl(ctrlPing, nil)
	}
}

// onPing answers an edge's PING with one of its own (origin), at most one per quarter
// round trip and only where probing pays: a response whose packet was lost then has a
// later packet for the edge to acknowledge (see above). The edge's PINGs of nudge.go get
// the same answer.
func (c *conn) onPing() {
	if !c.server {
		return
	}
	stats := c.qc.ConnectionStats()
	if _, pays := probeDelay(stats.SmoothedRTT, stats.MeanDeviation); !pays {
		return // the PING would only put off this side's own probe timeout
	}
	now := time.Now().UnixNano()
	last := c.lastPong.Load()
	if now-last < int64(stats.SmoothedRTT/4) || !c.lastPong.CompareAndSwap(last, now) {
		return
	}
	c.m.tailProbes.Inc()
	c.sendCtrl(ctrlPing, nil)
}
