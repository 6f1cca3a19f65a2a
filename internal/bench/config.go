package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// Env is what a configuration gets to start its middle boxes.
type Env struct {
	Client, Server Site
	// Upstream is the replay server (in the server site).
	Upstream netip.AddrPort
	// Dir is a fresh directory for this configuration's files (configs, logs, temp).
	Dir string
	// Binary is the soapgw executable; BinaryEnv extra environment for it.
	Binary    string
	BinaryEnv []string
	// Profile is the link's profile (timeouts may scale with it).
	Profile Profile
	// OneWay are the operations of the one-way scenarios the configuration will carry.
	// A configuration that can acknowledge a call itself and deliver it later marks them
	// (soapgw: edge.one_way); the others forward them as any call.
	OneWay []OneWayOperation
	// OneWayDeliveries is how many one-way messages a gateway delivers at once (0: its
	// default).
	OneWayDeliveries int
	// Pprof asks the gateways for their profiling endpoints (soapgw: admin.pprof),
	// reachable at Started.Endpoints' "<role>-admin" addresses.
	Pprof bool
}

// OneWayOperation names a one-way scenario's requests: those to a target under
// PathPrefix whose SOAP Body's first element has the local name Operation.
type OneWayOperation struct {
	PathPrefix string
	Operation  string
}

// Started is a running configuration.
type Started struct {
	// Target is where the client sends its calls (in the client site).
	Target Target
	// Procs are the middle-box processes, measured per run and stopped at the end.
	Procs []*Proc
	// Notes describe the configuration as started (versions, options).
	Notes []string
	// Endpoints are the middle boxes' listening addresses by role, for diagnostics.
	Endpoints map[string]string
}

// Stop stops every process.
func (s *Started) Stop() {
	for i := len(s.Procs) - 1; i >= 0; i-- {
		s.Procs[i].Stop(5 * time.Second)
	}
}

// Config is one way to connect the client to the server.
type Config interface {
	Name() string
	// Describe is a one-line description for the report.
	Describe() string
	// Start starts the middle boxes. An error wrapping ErrSkipped means the
	// configuration cannot run here (a missing program, a codec not implemented yet).
	Start(ctx context.Context, env *Env) (*Started, error)
}

// ErrSkipped marks a configuration that cannot run on this machine or build.
var ErrSkipped = errors.New("skipped")

// skipf returns an error wrapping ErrSkipped.
func skipf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrSkipped, fmt.Sprintf(format, args...))
}

// SoapgwCodecs are the codecs a soapgw/<codec> configuration may name.
var SoapgwCodecs = []string{"identity", "gzip", "zstd", "zstd-stream", "token", "auto"}

// DefaultConfigs is the default --configs list.
var DefaultConfigs = []string{"direct", "nginx-pair", "soapgw/identity", "soapgw/gzip", "soapgw/zstd", "soapgw/token", "soapgw/auto"}

// soapgwPrefixes are the soapgw configuration families: the TCP tunnel, the UDP tunnel
// without copies of small messages, with copies while packets are lost (the default),
// and with copies always; and the UDP tunnel (copies auto) with a TCP tunnel beside it
// (fallback tcp: large responses go over TCP while the UDP path loses packets).
var soapgwPrefixes = []struct {
	prefix     string
	transport  string
	redundancy string // edge.peers[].redundancy
	fallback   string // edge.peers[].fallback
}{{"soapgw/", "", "", ""}, {"soapgw-udp/", "udp", "off", ""}, {"soapgw-udp-auto/", "udp", "auto", ""}, {"soapgw-udp-redundant/", "udp", "on", ""},
	{"soapgw-udp-tcp/", "udp", "auto", "tcp"}}

// ConfigNames lists every configuration name ConfigByName knows: direct, nginx-pair,
// then each soapgw family (TCP tunnel, UDP tunnel with redundancy off, auto, on) with each
// codec.
func ConfigNames() []string {
	names := []string{"direct", "nginx-pair"}
	for _, f := range soapgwPrefixes {
		for _, c := range SoapgwCodecs {
			names = append(names, f.prefix+c)
		}
	}
	return names
}

// ConfigByName builds a configuration from its name.
func ConfigByName(name string) (Config, error) {
	switch {
	case name == "direct":
		return directConfig{}, nil
	case name == "nginx-pair":
		return nginxPair{}, nil
	}
	for _, f := range soapgwPrefixes {
		c, ok := strings.CutPrefix(name, f.prefix)
		if !ok {
			continue
		}
		for _, k := range SoapgwCodecs {
			if k == c {
				return soapgwPair{codec: c, transport: f.transport, redundancy: f.redundancy, fallback: f.fallback}, nil
			}
		}
		return nil, fmt.Errorf("configuration %q: unknown codec %q (known: %s)", name, c, strings.Join(SoapgwCodecs, ", "))
	}
	return nil, fmt.Errorf("unknown configuration %q (known: direct, nginx-pair, soapgw/<codec> (TCP tunnel), soapgw-udp/<codec> (UDP tunnel, redundancy off), soapgw-udp-auto/<codec> (redundancy auto), soapgw-udp-redundant/<codec> (redundancy on), soapgw-udp-tcp/<codec> (redundancy auto, fallback tcp), with codec one of %s)", name, strings.Join(SoapgwCodecs, ", "))
}

// resolveConfig resolves a configuration name, "name" or "name@label", to the
// configuration and the soapgw binary it runs: binary for a plain name, binaries[label]
// for a labelled one, so two builds run side by side in one invocation (--binary-as).
func resolveConfig(name, binary string, binaries map[string]string) (Config, string, error) {
	base, label, labelled := strings.Cut(name, "@")
	cfg, err := ConfigByName(base)
	if err != nil || !labelled {
		return cfg, binary, err
	}
	bin, ok := binaries[label]
	if !ok || bin == "" {
		return nil, "", fmt.Errorf("configuration %q: no binary labelled %q (--binary-as %s=PATH)", name, label, label)
	}
	return labelledConfig{Config: cfg, name: name, binary: bin}, bin, nil
}

// labelledConfig is a configuration run by another soapgw binary (resolveConfig).
type labelledConfig struct {
	Config
	name, binary string
}

func (c labelledConfig) Name() string     { return c.name }
func (c labelledConfig) Describe() string { return c.Config.Describe() + " (binary " + c.binary + ")" }

// directConfig: the client calls the server across the link, HTTP/1.0, a connection
// per call: what legacy clients do today.
type directConfig struct{}

func (directConfig) Name() string { return "direct" }
func (directConfig) Describe() string {
	return "client → server across the link; HTTP/1.0, a TCP connection per call"
}
func (directConfig) Start(_ context.Context, env *Env) (*Started, error) {
	return &Started{Target: Target{Site: env.Client, Addr: env.Upstream.String(), Host: env.Upstream.String()}}, nil
}

// waitListening dials addr from site until it accepts or within passes, failing early
// if a process exits.
func waitListening(ctx context.Context, site Site, addr string, within time.Duration, procs ...*Proc) error {
	deadline := time.Now().Add(within)
	for {
		for _, p := range procs {
			if done, err := p.Exited(); done {
				return fmt.Errorf("%s exited during start-up (%v): %s", p.Name, err, p.LogTail(800))
			}
		}
		dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		c, err := site.DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s not listening after %s: %v", addr, within, err)
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// hostPort joins an address and a port.
func hostPort(a netip.Addr, port int) string { return net.JoinHostPort(a.String(), fmt.Sprint(port)) }
