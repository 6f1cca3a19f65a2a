package quic

import "time"

// Nudging (SPEC.md, "Address changes"): when the edge's address changes while it only
// waits for responses, the origin cannot know the new address until the edge sends a
// packet, and quic-go's keepalive sends one only after half the idle timeout. The edge
// sends a PING control frame instead once it has heard nothing for a while.
const (
	nudgeMin = 200 * time.Millisecond // floor of the quiet interval before a PING
	nudgeMax = 5 * time.Second        // ceiling of the interval after repeated PINGs
)

// startNudge starts the edge's nudger for c; it ends with the connection.
func (c *conn) startNudge() {
	c.wg.Add(1)
	go c.nudge()
}

func (c *conn) nudge() {
	defer c.wg.Done()
	var backoff time.Duration // 0: no PING sent since exchanges last made progress
	last, progress := c.qc.ConnectionStats().PacketsReceived, c.progress.Load()
	t := time.NewTimer(nudgeMin)
	defer t.Stop()
	for {
		select {
		case <-c.done():
			return
		case <-t.C:
		}
		stats := c.qc.ConnectionStats()
		quiet := stats.PacketsReceived == last
		last = stats.PacketsReceived
		every := max(nudgeMin, 4*stats.SmoothedRTT)
		// A PING's ACK makes the next interval look busy: only bytes read by an
		// exchange (or no exchange left) end a stall and its backoff.
		if p := c.progress.Load(); p != progress || c.streams.Load() == 0 {
			progress, backoff = p, 0
		}
		switch {
		case c.streams.Load() == 0:
		case quiet:
			c.sendCtrl(ctrlPing, nil)
			backoff = min(max(2*backoff, 2*every), nudgeMax)
		}
		t.Reset(max(every, backoff))
	}
}
