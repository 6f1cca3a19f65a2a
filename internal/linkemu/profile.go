package linkemu

import (
	"fmt"
	"math"
	"time"
)

// Shape describes one direction of the emulated link. The zero value is a
// perfect link: no delay, no loss, unlimited bandwidth.
type Shape struct {
	// Delay is the one-way base (propagation) delay.
	Delay time.Duration
	// Jitter adds a uniform random offset in [-Jitter, +Jitter] to Delay.
	// It never reorders packets: a packet is never delivered before the one
	// sent ahead of it in the same direction, so at high packet rates the
	// mean delay drifts towards Delay+Jitter, as on a real FIFO path.
	Jitter time.Duration
	// Loss is the probability (0..1) that a packet is lost. Loss is per
	// direction; a request-response loses a message with about twice this
	// probability. A lost packet has still used its share of the bandwidth.
	Loss float64
	// Duplicate is the probability (0..1) that a packet is delivered twice
	// (the copy right after the original).
	Duplicate float64
	// Reorder is the probability (0..1) that a packet skips ahead of the
	// queue: it is delivered after its own serialization time only, without
	// the propagation delay, and so overtakes the packets in flight.
	Reorder float64
	// RateBps is the bottleneck bandwidth in bits per second; 0 means
	// unlimited. Every packet occupies the link for len*8/RateBps.
	RateBps int64
	// QueueBytes bounds the bottleneck queue when RateBps > 0: a packet is
	// tail-dropped (counted in DirStats.QueueDrops) when the bytes ahead of
	// it that have not finished serializing, plus its own, exceed it. A
	// packet arriving at an idle link is never dropped. 0 means
	// DefaultQueueBytes.
	QueueBytes int
}

// Profile is a named pair of shapes.
type Profile struct {
	// Name identifies the profile, e.g. "wlan".
	Name string
	// Description says where the numbers come from (paper, table).
	Description string
	// Up shapes traffic from the client site to the server site, Down the
	// replies.
	Up, Down Shape
}

// DefaultQueueBytes is the bottleneck queue used when Shape.QueueBytes is 0.
const DefaultQueueBytes = 64 << 10

// IsZero reports whether s is a perfect link.
func (s Shape) IsZero() bool { return s == Shape{} }

// validate checks the ranges of s; what names the direction in errors.
func (s Shape) validate(what string) error {
	switch {
	case s.Delay < 0:
		return fmt.Errorf("%s.delay %v: must not be negative", what, s.Delay)
	case s.Jitter < 0:
		return fmt.Errorf("%s.jitter %v: must not be negative", what, s.Jitter)
	case s.Delay > time.Minute || s.Jitter > time.Minute:
		return fmt.Errorf("%s: delay and jitter must be at most 1m", what)
	case s.RateBps < 0:
		return fmt.Errorf("%s.rate %d: must not be negative", what, s.RateBps)
	case s.QueueBytes < 0:
		return fmt.Errorf("%s.queue %d: must not be negative", what, s.QueueBytes)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"loss", s.Loss}, {"duplicate", s.Duplicate}, {"reorder", s.Reorder}} {
		if math.IsNaN(f.v) || f.v < 0 || f.v > 1 {
			return fmt.Errorf("%s.%s %v: must be a probability in [0, 1]", what, f.name, f.v)
		}
	}
	return nil
}

// Validate reports the first out-of-range field of p (negative durations or
// rates, probabilities outside [0, 1]).
func (p Profile) Validate() error {
	if err := p.Up.validate("up"); err != nil {
		return fmt.Errorf("profile %q: %w", p.Name, err)
	}
	if err := p.Down.validate("down"); err != nil {
		return fmt.Errorf("profile %q: %w", p.Name, err)
	}
	return nil
}

// Units for RateBps.
const (
	Kbit int64 = 1000
	Mbit int64 = 1000 * Kbit
)

func sym(s Shape) (up, down Shape) { return s, s }

// Profiles returns the built-in profiles, a fresh slice each call:
//
//   - loopback: client and server on one host (seed 000, Table 3, RTT
//     0.0 ms). Zero shapes; the benchmarks run it without the emulator, so
//     Setup is not needed.
//   - lan: two hosts on one switched Ethernet (seed 000, Table 3, RTT
//     0.1 ms): 50 µs each way.
//   - wlan: ad hoc 802.11b WLAN between two hosts (seed 000, Table 3, ping
//     RTT 2.3/2.5/4.4 ms min/avg/max): 1.25 ms ± 0.15 ms each way, 0.5 %
//     loss per direction.
//   - routed-wlan: five-hop route whose first hop is a WLAN (seed 000,
//     Table 3, RTT 9.2/13.8/25.8 ms): 6.9 ms ± 2.3 ms each way, 1 % loss.
//   - wifi-27: two laptops through an 802.11b router (seed 004, §5: ping
//     average 27 ms): 13.5 ms each way at 11 Mbit/s.
//   - 3g: a typical UMTS/HSPA path (not from the seeds): 75 ms ± 5 ms each
//     way, 1 Mbit/s, 1 % loss.
//   - gprs: GPRS (seed 000, §4: "between 800 and 900 ms with large
//     variations"): 410 ms ± 40 ms each way, 40 kbit/s, 2 % loss, 16 KiB
//     queue.
//
// Uniform jitter cannot reproduce the long tails of the measured maxima
// (4.4 ms, 25.8 ms); the minimum and mean are matched instead. Loss figures
// other than the paper-given ones are typical values, named as such in
// each Description.
func Profiles() []Profile {
	var ps []Profile
	add := func(p Profile) { ps = append(ps, p) }

	add(Profile{
		Name: "loopback",
		Description: "Seed 000 (Kangasharju et al.), Table 3 \"Loopback\": client and server on the same machine, " +
			"RTT 0.0 ms. No emulation: run client and server on the host's loopback, Setup is not needed.",
	})
	p := Profile{
		Name: "lan",
		Description: "Seed 000, Table 3 \"LAN\": client and server on different machines on the same Ethernet, " +
			"ping RTT 0.1 ms. Emulated as 50 µs each way, no loss, unlimited rate.",
	}
	p.Up, p.Down = sym(Shape{Delay: 50 * time.Microsecond})
	add(p)

	p = Profile{
		Name: "wlan",
		Description: "Seed 000, Table 3 \"WLAN\": two machines in an 802.11b ad hoc WLAN (Nokia D211), ping RTT " +
			"2.3/2.5/4.4 ms min/avg/max. Emulated as 1.25 ms ± 0.15 ms each way (RTT 2.2-2.8 ms, mean 2.5 ms); " +
			"0.5 % loss per direction is a typical residual 802.11b loss, not from the paper.",
	}
	p.Up, p.Down = sym(Shape{Delay: 1250 * time.Microsecond, Jitter: 150 * time.Microsecond, Loss: 0.005})
	add(p)

	p = Profile{
		Name: "routed-wlan",
		Description: "Seed 000, Table 3 \"Routed WLAN\": a five-hop route whose first hop is a WLAN, ping RTT " +
			"9.2/13.8/25.8 ms. Emulated as 6.9 ms ± 2.3 ms each way (RTT 9.2-18.4 ms, mean 13.8 ms; the 25.8 ms " +
			"tail is not reproduced); 1 % loss per direction is a typical value, not from the paper.",
	}
	p.Up, p.Down = sym(Shape{Delay: 6900 * time.Microsecond, Jitter: 2300 * time.Microsecond, Loss: 0.01})
	add(p)

	p = Profile{
		Name: "wifi-27",
		Description: "Seed 004 (SOAP over UDP), §5 \"WLAN\": two laptops with 802.11b through a Netgear DG834G " +
			"router, ping average RTT 27 ms. Emulated as 13.5 ms each way at the 11 Mbit/s 802.11b nominal rate " +
			"(full duplex; the shared half-duplex medium is not modelled), no loss.",
	}
	p.Up, p.Down = sym(Shape{Delay: 13500 * time.Microsecond, RateBps: 11 * Mbit})
	add(p)

	p = Profile{
		Name: "3g",
		Description: "A typical UMTS/HSPA path, not from the seeds: RTT ≈150 ms, ≈1 Mbit/s, 1 % loss. " +
			"Emulated as 75 ms ± 5 ms each way, 1 Mbit/s, 1 % loss per direction.",
	}
	p.Up, p.Down = sym(Shape{Delay: 75 * time.Millisecond, Jitter: 5 * time.Millisecond, Loss: 0.01, RateBps: 1 * Mbit})
	add(p)

	p = Profile{
		Name: "gprs",
		Description: "Seed 000, §4: a GPRS connection has an average latency \"between 800 and 900 ms with large " +
			"variations\" and much lower bandwidth than WLAN. Emulated as 410 ms ± 40 ms each way at 40 kbit/s " +
			"(a ping then sees ≈850 ms: 17 ms of it is serialization), 2 % loss per direction and a 16 KiB " +
			"queue (≈3 s); rate, loss and queue are typical GPRS values, not from the paper.",
	}
	p.Up, p.Down = sym(Shape{Delay: 410 * time.Millisecond, Jitter: 40 * time.Millisecond, Loss: 0.02,
		RateBps: 40 * Kbit, QueueBytes: 16 << 10})
	add(p)
	return ps
}

// ProfileByName returns the built-in profile called name.
func ProfileByName(name string) (Profile, bool) {
	for _, p := range Profiles() {
		if p.Name == name {
			return p, true
		}
	}
	return Profile{}, false
}
