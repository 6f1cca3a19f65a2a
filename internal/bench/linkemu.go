package bench

import (
	"context"
	"net"
	"net/netip"
	"os/exec"

	"github.com/soapgw/soapgw/internal/linkemu"
)

// The adapter between this package's Site/Link and internal/linkemu: two network
// namespaces joined by a shaping forwarder that counts every IP packet.

func init() { registerEmulator(emulator{}) }

type emulator struct{}

func fromShape(s linkemu.Shape) Shape {
	return Shape{Delay: s.Delay, Jitter: s.Jitter, Loss: s.Loss, Duplicate: s.Duplicate, Reorder: s.Reorder, RateBps: s.RateBps, QueueBytes: s.QueueBytes}
}

func toShape(s Shape) linkemu.Shape {
	return linkemu.Shape{Delay: s.Delay, Jitter: s.Jitter, Loss: s.Loss, Duplicate: s.Duplicate, Reorder: s.Reorder, RateBps: s.RateBps, QueueBytes: s.QueueBytes}
}

func fromProfile(p linkemu.Profile) Profile {
	return Profile{Name: p.Name, Description: p.Description, Up: fromShape(p.Up), Down: fromShape(p.Down)}
}

func (emulator) Profiles() []Profile {
	var out []Profile
	for _, p := range linkemu.Profiles() {
		if p.Name == LoopbackProfile {
			continue // run without the emulator (see KnownProfiles)
		}
		out = append(out, fromProfile(p))
	}
	return out
}

func (emulator) LoadProfiles(path string) ([]Profile, error) {
	ps, err := linkemu.LoadProfiles(path)
	if err != nil {
		return nil, err
	}
	out := make([]Profile, len(ps))
	for i, p := range ps {
		out[i] = fromProfile(p)
	}
	return out, nil
}

func (emulator) Open(ctx context.Context, p Profile, name string, seed uint64) (Link, error) {
	lp := linkemu.Profile{Name: p.Name, Description: p.Description, Up: toShape(p.Up), Down: toShape(p.Down)}
	l, err := linkemu.Setup(ctx, lp, linkemu.Options{Name: name, Seed: seed})
	if err != nil {
		return nil, err
	}
	return &emuLink{l: l, p: p}, nil
}

type emuLink struct {
	l *linkemu.Link
	p Profile
}

func (e *emuLink) Profile() Profile { return e.p }
func (e *emuLink) Client() Site {
	return emuSite{l: e.l, name: "client", ns: e.l.ClientNS(), addr: e.l.ClientAddr()}
}
func (e *emuLink) Server() Site {
	return emuSite{l: e.l, name: "server", ns: e.l.ServerNS(), addr: e.l.ServerAddr()}
}
func (e *emuLink) ResetStats()  { e.l.ResetStats() }
func (e *emuLink) Close() error { return e.l.Close() }
func (e *emuLink) Stats() (LinkStats, bool) {
	s := e.l.Stats()
	return LinkStats{Up: fromDir(s.Up), Down: fromDir(s.Down)}, true
}

func fromDir(d linkemu.DirStats) DirStats {
	return DirStats{
		Packets: d.Packets, Bytes: d.Bytes,
		PureTCPPackets: d.PureTCPPackets, PureTCPBytes: d.PureTCPBytes,
		TCPDataPackets: d.TCPDataPackets, TCPDataBytes: d.TCPDataBytes,
		UDPPackets: d.UDPPackets, UDPBytes: d.UDPBytes,
		OtherPackets: d.OtherPackets, OtherBytes: d.OtherBytes,
		Dropped: d.Dropped, Duplicated: d.Duplicated, Reordered: d.Reordered, QueueDrops: d.QueueDrops, QueueDropBytes: d.QueueDropBytes,
	}
}

type emuSite struct {
	l    *linkemu.Link
	name string
	ns   string
	addr netip.Addr
}

func (s emuSite) Name() string     { return s.name }
func (s emuSite) Addr() netip.Addr { return s.addr }
func (s emuSite) Command(name string, args ...string) *exec.Cmd {
	return s.l.Command(s.ns, name, args...)
}
func (s emuSite) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return s.l.DialContext(ctx, s.ns, network, addr)
}
func (s emuSite) Listen(network, addr string) (net.Listener, error) {
	return s.l.Listen(s.ns, network, addr)
}
