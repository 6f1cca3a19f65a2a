package bench

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"sync"
	"time"
)

// Site is one side of the emulated link: the client's machine or the server's. Every
// process and socket of a run is created through a Site, so the same code runs on
// loopback and inside the network namespaces of an emulated link.
type Site interface {
	// Name is "client" or "server".
	Name() string
	// Addr is the address other processes use to reach this site (listeners bind it).
	Addr() netip.Addr
	// Command prepares a process that runs inside the site.
	Command(name string, args ...string) *exec.Cmd
	// DialContext opens a connection from inside the site.
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
	// Listen opens a listener inside the site.
	Listen(network, addr string) (net.Listener, error)
}

// Shape is one direction of a link profile (a copy of linkemu.Shape, so this package
// compiles without the emulator).
type Shape struct {
	Delay      time.Duration `json:"delay_ns"`
	Jitter     time.Duration `json:"jitter_ns"`
	Loss       float64       `json:"loss"`
	Duplicate  float64       `json:"duplicate"`
	Reorder    float64       `json:"reorder"`
	RateBps    int64         `json:"rate_bps"` // bits per second; 0 = unlimited
	QueueBytes int           `json:"queue_bytes"`
}

// Profile describes a link: Up is client → server, Down server → client.
type Profile struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Up          Shape  `json:"up"`
	Down        Shape  `json:"down"`
}

// RTT is the round-trip time the profile adds (without queueing or serialization).
func (p Profile) RTT() time.Duration { return p.Up.Delay + p.Down.Delay }

// Summary is a one-line description of the shape, for reports.
func (p Profile) Summary() string {
	if p.Name == LoopbackProfile {
		return "no emulator: 127.0.0.1 in this namespace"
	}
	s := fmt.Sprintf("RTT %s", p.RTT())
	if p.Up.Jitter > 0 || p.Down.Jitter > 0 {
		s += fmt.Sprintf(" ± %s", max(p.Up.Jitter, p.Down.Jitter))
	}
	if p.Up.RateBps > 0 || p.Down.RateBps > 0 {
		s += fmt.Sprintf(", %s up / %s down", fmtRate(p.Up.RateBps), fmtRate(p.Down.RateBps))
	}
	if p.Up.Loss > 0 || p.Down.Loss > 0 {
		s += fmt.Sprintf(", loss %.2g%% / %.2g%%", 100*p.Up.Loss, 100*p.Down.Loss)
	}
	return s
}

func fmtRate(bps int64) string {
	switch {
	case bps <= 0:
		return "unlimited"
	case bps >= 1_000_000:
		return fmt.Sprintf("%.3g Mbit/s", float64(bps)/1e6)
	case bps >= 1000:
		return fmt.Sprintf("%.3g kbit/s", float64(bps)/1e3)
	}
	return fmt.Sprintf("%d bit/s", bps)
}

// DirStats counts the IP packets the emulator carried in one direction (a copy of
// linkemu.DirStats). Bytes are whole IP packets, headers included.
type DirStats struct {
	Packets        uint64 `json:"packets"`
	Bytes          uint64 `json:"bytes"`
	PureTCPPackets uint64 `json:"pure_tcp_packets"`
	PureTCPBytes   uint64 `json:"pure_tcp_bytes"`
	TCPDataPackets uint64 `json:"tcp_data_packets"`
	TCPDataBytes   uint64 `json:"tcp_data_bytes"`
	UDPPackets     uint64 `json:"udp_packets"`
	UDPBytes       uint64 `json:"udp_bytes"`
	OtherPackets   uint64 `json:"other_packets"`
	OtherBytes     uint64 `json:"other_bytes"`
	Dropped        uint64 `json:"dropped"`
	Duplicated     uint64 `json:"duplicated"`
	Reordered      uint64 `json:"reordered"`
	QueueDrops     uint64 `json:"queue_drops"`
	QueueDropBytes uint64 `json:"queue_drop_bytes"`
}

// LinkStats is both directions.
type LinkStats struct {
	Up   DirStats `json:"up"`
	Down DirStats `json:"down"`
}

// Link is an emulated (or loopback) path between a client site and a server site.
type Link interface {
	Profile() Profile
	Client() Site
	Server() Site
	// Stats reports the packets carried since the last ResetStats; ok is false when the
	// link cannot count (loopback).
	Stats() (s LinkStats, ok bool)
	ResetStats()
	Close() error
}

// LinkOpener sets up a link for a profile. name is unique per run (namespace names).
type LinkOpener interface {
	// Profiles lists the profiles it knows, in a sensible order (fast to slow).
	Profiles() []Profile
	// LoadProfiles adds the profiles of a user file.
	LoadProfiles(path string) ([]Profile, error)
	// Open sets up the link.
	Open(ctx context.Context, p Profile, name string, seed uint64) (Link, error)
}

// LoopbackProfile is the profile without an emulator.
const LoopbackProfile = "loopback"

var (
	emuMu     sync.Mutex
	emuOpener LinkOpener // set by the linkemu adapter when it is compiled in
)

// registerEmulator installs the emulator-backed opener (called from an init function).
func registerEmulator(o LinkOpener) {
	emuMu.Lock()
	defer emuMu.Unlock()
	emuOpener = o
}

// Emulator returns the emulator-backed opener, or nil when none is compiled in.
func Emulator() LinkOpener {
	emuMu.Lock()
	defer emuMu.Unlock()
	return emuOpener
}

// KnownProfiles lists loopback and every profile of the emulator (if any), plus extra.
func KnownProfiles(extra []Profile) []Profile {
	ps := []Profile{{Name: LoopbackProfile, Description: "no emulator: everything on 127.0.0.1 in this namespace"}}
	if e := Emulator(); e != nil {
		ps = append(ps, e.Profiles()...)
	}
	seen := map[string]int{}
	for i, p := range ps {
		seen[p.Name] = i
	}
	for _, p := range extra {
		if i, ok := seen[p.Name]; ok {
			ps[i] = p // a user file overrides a built-in profile of the same name
			continue
		}
		seen[p.Name] = len(ps)
		ps = append(ps, p)
	}
	return ps
}

// ProfileNames returns the names of ps, sorted as given.
func ProfileNames(ps []Profile) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

// openLink opens the loopback link or asks the emulator.
func openLink(ctx context.Context, p Profile, name string, seed uint64) (Link, error) {
	if p.Name == LoopbackProfile {
		return loopbackLink{}, nil
	}
	e := Emulator()
	if e == nil {
		return nil, fmt.Errorf("profile %q needs the link emulator (internal/linkemu), which this build does not include", p.Name)
	}
	return e.Open(ctx, p, name, seed)
}

// loopbackSite is the current network namespace, on 127.0.0.1.
type loopbackSite struct{ name string }

func (s loopbackSite) Name() string     { return s.name }
func (s loopbackSite) Addr() netip.Addr { return netip.AddrFrom4([4]byte{127, 0, 0, 1}) }
func (s loopbackSite) Command(name string, args ...string) *exec.Cmd {
	return exec.Command(name, args...)
}
func (s loopbackSite) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}
func (s loopbackSite) Listen(network, addr string) (net.Listener, error) {
	return net.Listen(network, addr)
}

type loopbackLink struct{}

func (loopbackLink) Profile() Profile {
	return Profile{Name: LoopbackProfile, Description: "no emulator: everything on 127.0.0.1 in this namespace"}
}
func (loopbackLink) Client() Site             { return loopbackSite{"client"} }
func (loopbackLink) Server() Site             { return loopbackSite{"server"} }
func (loopbackLink) Stats() (LinkStats, bool) { return LinkStats{}, false }
func (loopbackLink) ResetStats()              {}
func (loopbackLink) Close() error             { return nil }

// freePorts finds a port that is free now on each site's address, a different one for
// each: the listeners stay open until all are found, or the kernel may hand the same
// port out twice (a configuration's admin and tunnel listeners then clash). Another
// process may take one before it is used; in a fresh namespace that does not happen, on
// loopback it is unlikely, and a clash fails the configuration's start with a clear
// error.
func freePorts(sites ...Site) ([]int, error) {
	ports := make([]int, len(sites))
	for i, s := range sites {
		ln, err := s.Listen("tcp", netip.AddrPortFrom(s.Addr(), 0).String())
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}
