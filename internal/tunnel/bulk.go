package tunnel

import "time"

// Bulk messages share packets. A one-way delivery from an edge's spool, and the origin's
// answer to it, is a small message nobody waits on, and a spool that delivers over a slow
// link has a thousand of them in flight. Written the moment each is queued, every one
// went out in a TCP segment of its own: on a 1 Mbit/s path with 150 ms of round trip a
// delivery of a 652-byte request coded to ~9 bytes (18 with its frame) took 44-56 bytes
// of IP each way, TCP/IP and TLS headers for one or two messages a packet, and the
// link carried half the messages it could (docs/benchmarks.md, "One-way messages share
// packets"). TCP does not merge them itself: the congestion controller's pacing is far
// above such a link's rate (BBR overestimates it from bunched acknowledgements), so each
// write leaves at once.
//
// So the writer holds frames of bulk streams (Stream.SetBulk) for up to
// Config.BulkDelay, to write them with the ones queued meanwhile in one flush, while all
// of these hold:
//
//   - only bulk frames are queued: a frame someone waits on (an ordinary exchange), or a
//     control frame (PING, window update, RST, GOAWAY), ends the hold and is written with
//     everything queued;
//   - the connection carries at least bulkHoldStreams exchanges: with fewer there is
//     nothing to wait for (one-way deliveries in order, one at a time, a trickle), and
//     holding would only add the delay to each;
//   - fewer than bulkHoldMax bulk streams have frames queued: enough for full packets.
//
// Holding adds at most BulkDelay to a delivery each way; a spool's deliveries are
// asynchronous to their clients, whose acknowledgement came from the spool.
const (
	bulkHoldStreams = 8
	bulkHoldMax     = 64
)

// SetBulk marks the stream's messages as bulk: nobody waits on their latency (a one-way
// delivery, or the answer to one), so the writer may hold their frames for a few
// milliseconds to share packets with others (see Config.BulkDelay). Call it before the
// first Write.
func (st *Stream) SetBulk() {
	s := st.s
	s.mu.Lock()
	if !st.bulk && st.inRing {
		s.ringUrgent--
		s.ringBulk++
	}
	st.bulk = true
	s.mu.Unlock()
}

// enterRingLocked queues st for the writer, if it is not queued yet. s.mu is held.
func (s *Session) enterRingLocked(st *Stream) {
	if st.inRing {
		return
	}
	st.inRing = true
	s.ring = append(s.ring, st)
	if st.bulk {
		s.ringBulk++
	} else {
		s.ringUrgent++
	}
}

// leaveRingLocked notes that st left the writer's ring. s.mu is held.
func (s *Session) leaveRingLocked(st *Stream) {
	st.inRing = false
	if st.bulk {
		s.ringBulk--
	} else {
		s.ringUrgent--
	}
}

// holdsBulk reports whether the writer should hold what is queued (see the rules above).
func (s *Session) holdsBulk() bool {
	if s.cfg.BulkDelay <= 0 || s.closing.Load() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ringBulk > 0 && s.ringBulk < bulkHoldMax && s.ringUrgent == 0 && len(s.ctrlQ) == 0 &&
		len(s.streams)-s.lingering >= bulkHoldStreams
}

// holdBulk waits, before sendLoop writes, for up to BulkDelay while holdsBulk stays
// true: each frame queued meanwhile wakes it to look again.
func (s *Session) holdBulk() {
	if !s.holdsBulk() {
		return
	}
	if s.bulkTimer == nil {
		s.bulkTimer = time.NewTimer(s.cfg.BulkDelay)
	} else {
		s.bulkTimer.Reset(s.cfg.BulkDelay)
	}
	defer s.bulkTimer.Stop()
	for {
		select {
		case <-s.bulkTimer.C:
			return
		case <-s.wsignal:
			if !s.holdsBulk() {
				return
			}
		case <-s.ctx.Done():
			return
		}
	}
}
