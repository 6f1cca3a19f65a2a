package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/soapgw/soapgw/internal/ledger"
)

// Stream is one exchange on the tunnel as the proxy sees it: the request message goes one
// way, the response message the other. *tunnel.Stream satisfies it; the proxy does not
// import the tunnel, so it can be tested over any transport.
type Stream interface {
	io.Reader
	io.Writer
	Flush() error      // push buffered bytes now (streaming)
	CloseWrite() error // end of this side's message
	Close() error      // release; resets the stream if the exchange is unfinished
	SetDeadline(time.Time) error
}

// BulkStream is a Stream whose transport can trade latency for bytes when told nobody
// waits on the message: the UDP tunnel then codes it on the shared codec state behind
// other unacknowledged messages, and the TCP tunnel holds it a few milliseconds to share
// packets with others. The one-way forwarder marks its deliveries so, and the origin its
// answers to them.
type BulkStream interface {
	Stream
	SetBulk()
}

// BulkOpener is an Opener that opens streams for messages nobody waits on (one-way
// deliveries; the stream is a BulkStream, already marked) apart from the ones ordinary
// exchanges need: the tunnels keep a thirty-second of each connection's streams free of them,
// so a spool's backlog never makes a client's call wait for a stream.
type BulkOpener interface {
	OpenBulkStream(ctx context.Context) (Stream, error)
}

// DeliveryNotifier is a Stream that can tell when the peer acknowledged decoding the
// message this side wrote on it (tunnel streams, for coded messages: AfterDelivered). The
// origin forgets a held response then.
type DeliveryNotifier interface {
	AfterDelivered(f func())
}

// Opener opens a stream to one peer gateway.
type Opener interface {
	OpenStream(ctx context.Context) (Stream, error)
}

// A Diverter is an Opener that also reaches the same origin over a second tunnel (cmd: a
// UDP peer with fallback tcp keeps a TCP tunnel beside the UDP one). An origin may answer
// that it sends an exchange's response there instead (a large one while the UDP path
// loses packets); the edge then collects it with a stream from OpenDiverted (resume.go).
type Diverter interface {
	Opener
	OpenDiverted(ctx context.Context) (Stream, error)
}

// OpenerFunc adapts a function to Opener.
type OpenerFunc func(ctx context.Context) (Stream, error)

// OpenStream calls f.
func (f OpenerFunc) OpenStream(ctx context.Context) (Stream, error) { return f(ctx) }

// Limits bound what one exchange may cost.
type Limits struct {
	MaxRequestBytes        int64         // request body; larger gets 413 (default 32 MiB)
	MaxResponseBytes       int64         // response body the edge buffers for HTTP/1.0 clients (default 64 MiB)
	MaxHeaderBytes         int           // request/response head (default 64 KiB)
	ExchangeTimeout        time.Duration // longest an exchange may go without progress (default DefaultExchangeTimeout)
	ExchangeMaxDuration    time.Duration // longest an exchange may take however it moves (default DefaultExchangeMaxDuration)
	IdleTimeout            time.Duration // client keep-alive idle (default 90 s)
	MaxConcurrentExchanges int           // per process; more get 503 (default 4096)
	// MaxClientConnections caps the client connections an edge holds open across its
	// listeners (default 10000); one more is answered 503 and closed.
	MaxClientConnections int
	// AllowAbsoluteForm accepts "POST http://host/path" targets from clients configured
	// to go through a forward proxy; the target is forwarded as the client sent it and
	// routed by its host and path. Default false: such requests get 400.
	AllowAbsoluteForm bool
	// FaultStatus is the HTTP status line of the gateway's own SOAP Faults: the SOAP
	// bindings' 500/400 (FaultStatusSOAP, the zero value and default) or the
	// HTTP-semantic status (FaultStatusHTTP). The statuses named on these fields are the
	// HTTP-semantic ones, always in the Fault's X-Soapgw-Status field. Only the edge
	// renders Faults (the origin sends its errors to the edge), so it matters there.
	FaultStatus FaultStatus
}

// DefaultExchangeTimeout bounds how long an exchange may go without progress (no byte of
// it moved on any of its legs: progressClock) when Limits.ExchangeTimeout is not set. It
// is a backstop, not a service-level target: the gateway should never cut a call its
// client would still wait for. SOAP clients wait 60 s (Axis2, CXF, WCF), 100 s (.NET
// HttpWebRequest), 10 min (Axis 1) or without limit (zeep, gSOAP) for a read by default,
// so the default is the longest finite one. A client that gives up first ends the
// exchange itself: the edge sees its connection reset and abandons the exchange
// (watchClient), and the origin closes the upstream connection. What the backstop frees
// is an exchange whose client never gives up on a server that never answers.
const DefaultExchangeTimeout = 10 * time.Minute

// DefaultExchangeMaxDuration bounds an exchange however steadily its bytes move, when
// Limits.ExchangeMaxDuration is not set: far above any message a slow link carries
// (64 MiB, the response limit, takes under four hours at GPRS's 40 kbit/s), it only
// stops a peer that trickles bytes forever to hold an exchange's slots.
const DefaultExchangeMaxDuration = 24 * time.Hour

func (l Limits) withDefaults() Limits {
	if l.MaxRequestBytes <= 0 {
		l.MaxRequestBytes = 32 << 20
	}
	if l.MaxResponseBytes <= 0 {
		l.MaxResponseBytes = 64 << 20
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = 64 << 10
	}
	if l.ExchangeTimeout <= 0 {
		l.ExchangeTimeout = DefaultExchangeTimeout
	}
	if l.ExchangeMaxDuration <= 0 {
		l.ExchangeMaxDuration = DefaultExchangeMaxDuration
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = 90 * time.Second
	}
	if l.MaxConcurrentExchanges <= 0 {
		l.MaxConcurrentExchanges = 4096
	}
	if l.MaxClientConnections <= 0 {
		l.MaxClientConnections = 10000
	}
	return l
}

// Route maps requests to a peer gateway and to an upstream name at that peer. The first
// matching route wins; empty match fields match everything.
type Route struct {
	Listener   string // only requests that arrived on this listener
	PathPrefix string // request target starts with this ("/" or "" = any)
	Host       string // Host header equals this, case-insensitively; without a port in the pattern the request's port is ignored
	Peer       string
	Upstream   string
	// Opener, when set, opens this route's streams instead of Peers[Peer]: the same
	// peer with other stream settings (cmd/soapgw uses it for a per-route codec).
	Opener Opener
}

func (r *Route) matches(listener, host, target string) bool {
	if r.Listener != "" && r.Listener != listener {
		return false
	}
	if r.PathPrefix != "" && r.PathPrefix != "/" && !strings.HasPrefix(target, r.PathPrefix) {
		return false
	}
	if r.Host != "" {
		h := host
		if !hasPort(r.Host) {
			h = stripPort(h)
		}
		if !strings.EqualFold(h, r.Host) {
			return false
		}
	}
	return true
}

// hasPort reports whether a Host value carries a port; "[::1]" (an IPv6 literal) does not.
func hasPort(h string) bool {
	if strings.HasPrefix(h, "[") {
		return strings.Contains(h, "]:")
	}
	return strings.Contains(h, ":")
}

func stripPort(h string) string {
	if !hasPort(h) {
		return h
	}
	return h[:strings.LastIndexByte(h, ':')]
}

// EdgeConfig configures the client-side gateway.
type EdgeConfig struct {
	Routes []Route
	Peers  map[string]Opener // by peer name
	Limits Limits
	// ReplayLimit is the largest request body kept in memory so that an exchange refused by
	// the tunnel (never processed by the origin) can be sent again (default 1 MiB). It is
	// also the largest one-way message: a larger one (or a chunked one) goes synchronously.
	ReplayLimit int64
	// OneWay, when set, acknowledges the operations it marks from a durable spool and
	// delivers them in the background (oneway_edge.go).
	OneWay *OneWayConfig
}

func (c *EdgeConfig) validate() error {
	if c.OneWay != nil {
		c.OneWay.withDefaults()
		if err := c.OneWay.validate(); err != nil {
			return err
		}
	}
	if len(c.Routes) == 0 {
		return fmt.Errorf("proxy: edge needs at least one route")
	}
	for i, r := range c.Routes {
		if _, ok := c.Peers[r.Peer]; !ok {
			return fmt.Errorf("proxy: route %d names unknown peer %q", i, r.Peer)
		}
		if r.Upstream == "" {
			return fmt.Errorf("proxy: route %d has no upstream", i)
		}
	}
	return nil
}

// Upstream is a real service the origin may call.
type Upstream struct {
	Name    string
	Address string // host:port
	TLS     UpstreamTLS
	HTTP10  bool // speak HTTP/1.0: Content-Length bodies only
	// Chunked says the upstream accepts chunked request bodies: a body of unknown length
	// streams to it chunked (HTTP/1.1 only). False (the default): the origin reads such a
	// body whole, up to Limits.MaxRequestBytes, and sends it with a Content-Length.
	Chunked        bool
	RewriteHost    bool // replace the client's Host with Address
	ConnectTimeout time.Duration
	// ResponseTimeout bounds the wait for the response head after the request was sent;
	// 0 (the default): only the exchange deadline does.
	ResponseTimeout time.Duration
	IdleTimeout     time.Duration // pooled connection idle
	PoolSize        int           // idle connections kept
}

// UpstreamTLS says how the origin speaks TLS to an upstream (https). The PEM material is
// held as text, not as paths, so that an Upstream stays comparable: a reload keeps a pool
// (its idle and pinned connections) whose settings and files did not change, and replaces
// one whose certificate was rotated.
type UpstreamTLS struct {
	Enabled            bool
	InsecureSkipVerify bool
	ServerName         string // expected in the server's certificate; "": the host of Address
	RootsPEM           string // CAs that sign the server's certificate; "": the system roots
	CertPEM, KeyPEM    string // client certificate chain and key (mutual TLS); "": none
}

// clientConfig builds the TLS client configuration of connections to address, with a
// session cache so that a new connection resumes a session instead of a full handshake.
func (t UpstreamTLS) clientConfig(address string) (*tls.Config, error) {
	if !t.Enabled {
		return nil, nil
	}
	c := &tls.Config{
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify, //nolint:gosec // opt-in per upstream
		ClientSessionCache: tls.NewLRUClientSessionCache(64),
	}
	if c.ServerName == "" {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return nil, fmt.Errorf("address %q: %w", address, err)
		}
		c.ServerName = host
	}
	if t.RootsPEM != "" {
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM([]byte(t.RootsPEM)) {
			return nil, errors.New("ca_file: no PEM certificate found")
		}
	}
	if t.CertPEM != "" || t.KeyPEM != "" {
		cert, err := tls.X509KeyPair([]byte(t.CertPEM), []byte(t.KeyPEM))
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// OriginConfig configures the server-side gateway.
type OriginConfig struct {
	Node      string // for messages: origin "node"
	Upstreams []Upstream
	Limits    Limits
	// StreamFlushDelay is how long the upstream may pause in the middle of a response of
	// unknown length (chunked or close-delimited) before the origin pushes what it holds
	// of it to the client (default DefaultStreamFlushDelay). See sendResponse.
	StreamFlushDelay time.Duration
	// ResumeWindow is how long the origin keeps a finished exchange's response for an
	// edge whose tunnel connection died to collect (held.go): 0 means
	// DefaultResumeWindow, negative turns resuming off.
	ResumeWindow time.Duration
	// ResumeMaxBytes bounds the responses held for resumes, all together (default
	// DefaultResumeMaxBytes); one response may hold an eighth of it.
	ResumeMaxBytes int64
	// Ledger records the one-way messages delivered to the server (oneway_origin.go);
	// nil: one-way deliveries are refused (the edge keeps them).
	Ledger *ledger.Ledger
	// RedeliverInDoubt sends a one-way message again whose earlier delivery's outcome is
	// unknown (at least once) instead of refusing it (at most once, the default).
	RedeliverInDoubt bool
	// OneWayConcurrency bounds the one-way deliveries sent to the servers at once (default
	// DefaultOneWayConcurrency); more wait at the origin. Edges keep many in flight to
	// fill their link; this keeps a legacy server from getting all of them at once.
	OneWayConcurrency int
}

// DefaultOneWayConcurrency is OriginConfig.OneWayConcurrency when unset.
const DefaultOneWayConcurrency = 16
