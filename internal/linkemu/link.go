package linkemu

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Options name and address an emulated link.
type Options struct {
	// Name is a short prefix for the namespaces: the client site is
	// Name+"-c", the server site Name+"-s". Letters, digits, '-' and '_',
	// at most 32 characters. A leftover pair with the same names (from a
	// crashed run) is deleted by Setup.
	Name string
	// Seed seeds the random loss, jitter, reorder and duplicate decisions;
	// the same seed and the same packet sequence give the same decisions.
	Seed uint64
	// Subnet is the IPv4 prefix of the link, default 10.213.0.0/24; the
	// client site gets the first host address (.1), the server site the
	// second (.2). Each pair of namespaces is isolated, so several links may
	// use the same subnet at once.
	Subnet netip.Prefix
}

// DefaultSubnet is the subnet used when Options.Subnet is unset.
var DefaultSubnet = netip.MustParsePrefix("10.213.0.0/24")

// errNotSupported is wrapped by Setup on platforms without netns and TUN.
var errNotSupported = errors.New("linkemu: network namespaces and TUN devices need Linux")

func (o Options) normalize() (Options, error) {
	if o.Name == "" || len(o.Name) > 32 {
		return o, fmt.Errorf("linkemu: Options.Name %q: want 1 to 32 characters", o.Name)
	}
	for _, r := range o.Name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return o, fmt.Errorf("linkemu: Options.Name %q: only letters, digits, '-' and '_' are allowed", o.Name)
		}
	}
	if !o.Subnet.IsValid() {
		o.Subnet = DefaultSubnet
	}
	o.Subnet = o.Subnet.Masked()
	if !o.Subnet.Addr().Is4() || o.Subnet.Bits() > 30 || o.Subnet.Bits() < 8 {
		return o, fmt.Errorf("linkemu: Options.Subnet %v: want an IPv4 prefix between /8 and /30", o.Subnet)
	}
	return o, nil
}

// Link is an emulated link between two network namespaces: a client site
// and a server site, each with a TUN device, joined by a user-space
// forwarder that shapes each direction (see the package documentation).
// Its methods are safe for concurrent use.
type Link struct {
	clientNS, serverNS     string
	clientAddr, serverAddr netip.Addr
	epoch                  time.Time // zero of the forwarder's clock
	monoBase               int64     // CLOCK_MONOTONIC at epoch, ns

	up, down *pipe // up: client -> server
	profile  atomic.Pointer[Profile]

	wg        sync.WaitGroup
	closing   atomic.Bool
	closeOnce sync.Once
	closeErr  error
	loopErr   atomic.Pointer[error] // first error that stopped a forwarder loop

	sys linkSys // platform part
}

func newLink(p Profile, o Options) *Link {
	client := o.Subnet.Addr().Next()
	l := &Link{
		clientNS:   o.Name + "-c",
		serverNS:   o.Name + "-s",
		clientAddr: client,
		serverAddr: client.Next(),
	}
	l.epoch, l.monoBase = monoNow()
	l.profile.Store(&p)
	return l
}

// now is the forwarder's monotonic clock in ns.
func (l *Link) now() int64 { return int64(time.Since(l.epoch)) }

// ClientNS is the name of the client site's network namespace.
func (l *Link) ClientNS() string { return l.clientNS }

// ServerNS is the name of the server site's network namespace.
func (l *Link) ServerNS() string { return l.serverNS }

// ClientAddr is the client site's address on the link.
func (l *Link) ClientAddr() netip.Addr { return l.clientAddr }

// ServerAddr is the server site's address on the link.
func (l *Link) ServerAddr() netip.Addr { return l.serverAddr }

// Profile returns the profile in force.
func (l *Link) Profile() Profile { return *l.profile.Load() }

// SetProfile changes both shapes at once; packets already queued keep their
// delivery times. Meant for use between runs. Out-of-range values are
// clamped (probabilities to [0, 1], negative durations and rates to 0);
// use Profile.Validate first to reject them instead.
func (l *Link) SetProfile(p Profile) {
	l.profile.Store(&p)
	l.up.setShape(p.Up)
	l.down.setShape(p.Down)
}

// Stats returns a snapshot of the counters. The fields are read one by one,
// so a snapshot taken under traffic may be off by the packets in transit.
func (l *Link) Stats() Stats {
	return Stats{Up: l.up.st.snapshot(), Down: l.down.st.snapshot()}
}

// ResetStats zeroes the counters.
func (l *Link) ResetStats() {
	l.up.st.reset()
	l.down.st.reset()
}

func (l *Link) setLoopErr(err error) {
	if !l.closing.Load() {
		l.loopErr.CompareAndSwap(nil, &err)
	}
}
