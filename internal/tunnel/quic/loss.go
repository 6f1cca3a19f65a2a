package quic

import (
	"encoding/binary"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Loss reports (SPEC.md, "Loss reports").
//
// quic-go counts as lost only the packets its loss detection declares lost, which needs a
// later packet acknowledged. A one-packet SOAP message whose packet is lost has no later
// packet: it is resent after a probe timeout and never counted. On a request/response
// tunnel that is nearly every loss, so quic-go's counters cannot tell a lossy path from a
// clean one. Instead each side tells the other, now and then, how many packets it has
// received (RECEIVED); the sender compares that with what it has sent. The difference
// also holds the packets in flight when the report left, which cancels out over a window.
//
// The estimate drives copies when redundancy is auto: they go on while more than
// copiesOnLoss of this side's packets are lost and off again below copiesOffLoss.
const (
	reportEvery     = time.Second      // at most one report per interval
	reportPackets   = 64               // ...once this many packets came since the last
	reportIdleEvery = 10 * time.Second // or after this long, if any came at all
	lossHalfLife    = 20 * time.Second // weight of older reports halves every interval...
	// ...or every lossHalfLifePackets packets sent, whichever is slower. With time alone
	// the weighted count of a sender of r packets a second levels off at about 29 r, so
	// under 10 packets a second (one client on gprs: 2-3) it never reached lossEvidence
	// and auto never copied there.
	lossHalfLifePackets = 500
	lossEvidence        = 300              // packets sent (weighted) before the estimate is used
	copiesOnLoss        = 0.005            // copies go on at 0.5 % loss (p99 of 2-packet exchanges)
	copiesOffLoss       = 0.002            // ...and off below 0.2 %
	copiesMinOn         = 30 * time.Second // once on, copies stay on at least this long
)

// reporter decides when this side sends RECEIVED. Callers hold no lock.
type reporter struct {
	mu       sync.Mutex
	at       time.Time // last report
	received uint64    // packets received as of the last report
}

// due returns the payload of a RECEIVED frame to send now, or nil. received is asked
// only once a second at most: due runs before every message.
func (r *reporter) due(now time.Time, received func() uint64) []byte {
	if !r.mu.TryLock() {
		return nil // another exchange is deciding
	}
	defer r.mu.Unlock()
	gap := now.Sub(r.at)
	if gap < reportEvery {
		return nil
	}
	n := received()
	moved := n - r.received
	if moved == 0 || (moved < reportPackets && gap < reportIdleEvery) {
		return nil
	}
	r.at, r.received = now, n
	return binary.AppendUvarint(nil, n)
}

// lossMeter estimates the share of this side's packets the peer never received, from
// the peer's reports, and says whether copies should be on (redundancy auto).
type lossMeter struct {
	mu       sync.Mutex
	have     bool      // a first report set the baseline
	at       time.Time // arrival of the last report
	sent     uint64    // packets sent by us when it arrived
	received uint64    // packets the peer had received when it left
	sentEW   float64   // packets sent, weighted by age
	lostEW   float64   // packets missing, weighted by age (may dip below 0 briefly)
	onSince  time.Time // copies went on (zero: off)
	ratio    atomic.Uint64
	copying  atomic.Bool
	evidence atomic.Bool // the ratio rests on lossEvidence packets or more
}

// report records the peer's count of received packets, with ours of sent ones now, and
// reports whether copying switched on or off. A count that goes back (a peer's bug or a
// replayed frame) is ignored.
func (m *lossMeter) report(now time.Time, sent, received uint64) (switched bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.have && (received < m.received || sent < m.sent) {
		return false
	}
	if !m.have {
		m.have, m.at, m.sent, m.received = true, now, sent, received
		return false
	}
	dSent := float64(sent - m.sent)
	dLost := dSent - float64(received-m.received)
	decay := math.Exp2(-min(float64(now.Sub(m.at))/float64(lossHalfLife), dSent/lossHalfLifePackets))
	m.sentEW = m.sentEW*decay + dSent
	m.lostEW = m.lostEW*decay + dLost
	m.at, m.sent, m.received = now, sent, received
	if m.sentEW < lossEvidence {
		return false
	}
	m.evidence.Store(true)
	ratio := min(max(m.lostEW/m.sentEW, 0), 1)
	m.ratio.Store(math.Float64bits(ratio))
	switch on := m.copying.Load(); {
	case !on && ratio >= copiesOnLoss:
		m.onSince = now
		m.copying.Store(true)
		return true
	case on && ratio < copiesOffLoss && now.Sub(m.onSince) >= copiesMinOn:
		m.onSince = time.Time{}
		m.copying.Store(false)
		return true
	}
	return false
}

// lossRatio is the last estimate (0 until there is enough evidence).
func (m *lossMeter) lossRatio() float64 { return math.Float64frombits(m.ratio.Load()) }

// maybeReport sends RECEIVED when one is due. It runs just before an exchange writes its
// message, so the frame most often rides in the message's packet.
func (c *conn) maybeReport() {
	received := func() uint64 { return c.qc.ConnectionStats().PacketsReceived }
	if p := c.reports.due(time.Now(), received); p != nil {
		c.sendCtrl(ctrlReceived, p)
	}
}

// onReceivedReport takes the peer's RECEIVED.
func (c *conn) onReceivedReport(received uint64) {
	if c.loss.report(time.Now(), c.qc.ConnectionStats().PacketsSent, received) {
		c.copyTransition(c.loss.copying.Load(), c.loss.lossRatio())
	}
}

// lossyMinPackets is the packets quic-go must have sent before its own loss count says
// anything about the path (bulkAtRisk).
const lossyMinPackets = 100

// bulkAtRisk reports whether a bulk transfer on this connection would run into loss:
// this side's packets are being lost at the rate that turns copies on, by the peer's
// reports (lossMeter, which also sees lone one-packet losses) or by quic-go's own count
// over the connection (which bulk transfers feed within a few round trips); or the
// reports do not have their evidence yet (a new connection: the first second and 300
// packets). Assuming the worst until then keeps the first large responses of a lossy
// path off UDP, where a burst of them would crawl for seconds (16 clients at once on
// routed-wlan: p99 1.9 s); on a clean path it costs those few a round trip more.
func (c *conn) bulkAtRisk() bool {
	if !c.loss.evidence.Load() || c.loss.lossRatio() >= copiesOnLoss {
		return true
	}
	s := c.qc.ConnectionStats()
	return s.PacketsSent >= lossyMinPackets && float64(s.PacketsLost) >= copiesOnLoss*float64(s.PacketsSent)
}
