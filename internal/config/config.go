package config

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/soapgw/soapgw/internal/wsdl"
)

// CodecNames lists the values accepted by [Peer.Codec], [Route.Codec] and
// [OriginConfig.Codec] (cmd/soapgw checks internal/codec implements each).
var CodecNames = []string{"identity", "gzip", "zstd", "zstd-stream", "token", "auto"}

// Transports lists the values accepted by [Peer.Transport].
var Transports = []string{TransportTCP, TransportUDP}

// RedundancyModes lists the values accepted by [Peer.Redundancy] (unset is
// auto; true and false are read as on and off).
var RedundancyModes = []string{RedundancyAuto, RedundancyOn, RedundancyOff, "true", "false"}

// Fallbacks lists the values accepted by [Peer.Fallback].
var Fallbacks = []string{"", TransportTCP}

// FaultStatuses lists the values accepted by [Limits.FaultStatus].
var FaultStatuses = []string{FaultStatusSOAP, FaultStatusHTTP}

// Values of enumerated fields.
const (
	TransportTCP = "tcp"
	TransportUDP = "udp"

	RedundancyAuto = "auto"
	RedundancyOn   = "on"
	RedundancyOff  = "off"

	// UDPListenOff turns the origin's UDP tunnel listener off.
	UDPListenOff = "off"

	HTTP10 = "1.0"
	HTTP11 = "1.1"

	// HostHeaderPreserve forwards the client's Host header byte for byte.
	HostHeaderPreserve = "preserve"
	// HostHeaderUpstream rewrites Host to the host[:port] of Upstream.URL.
	HostHeaderUpstream = "upstream"

	// FaultStatusSOAP sends gateway Faults with the SOAP bindings' status.
	FaultStatusSOAP = "soap"
	// FaultStatusHTTP sends gateway Faults with the HTTP-semantic status.
	FaultStatusHTTP = "http"
)

// Config is the whole configuration of one soapgw process. At least one of
// Edge and Origin is set.
type Config struct {
	// Node is this gateway's identity, sent in the tunnel handshake and
	// used in logs. Default: the host name (or "soapgw" if it is unknown).
	Node string `yaml:"node"`
	// Admin configures the admin HTTP listener (/metrics, /healthz, pprof).
	Admin AdminConfig `yaml:"admin"`
	// Edge enables the edge role: accept SOAP clients, forward each
	// exchange over a tunnel to a peer. Nil when the section is absent.
	Edge *EdgeConfig `yaml:"edge,omitempty"`
	// Origin enables the origin role: accept tunnels, call the real
	// services. Nil when the section is absent.
	Origin *OriginConfig `yaml:"origin,omitempty"`
	// Limits bounds the resources one process will spend.
	Limits Limits `yaml:"limits"`
	// Codecs tunes the codecs both roles offer on their tunnels.
	Codecs CodecConfig `yaml:"codecs"`
	// DrainTimeout is how long, on SIGTERM, the process keeps finishing
	// in-flight exchanges before it closes them. 0 exits at once.
	// Default: 15s.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
}

// AdminConfig configures the admin HTTP listener.
type AdminConfig struct {
	// Listen is the host:port of the admin listener. Default: "" (disabled).
	Listen string `yaml:"listen"`
	// Pprof mounts net/http/pprof under /debug/pprof/ on the admin
	// listener. Default: false.
	Pprof bool `yaml:"pprof"`
}

// Limits bounds the resources one process will spend. They apply to both
// roles.
type Limits struct {
	// MaxRequestBytes is the largest request body accepted. Default: 32MiB.
	MaxRequestBytes ByteSize `yaml:"max_request_bytes"`
	// MaxResponseBytes is the largest response body accepted.
	// Default: 64MiB.
	MaxResponseBytes ByteSize `yaml:"max_response_bytes"`
	// MaxHeaderBytes is the largest HTTP message head (request line or
	// status line plus headers). Default: 64KiB.
	MaxHeaderBytes ByteSize `yaml:"max_header_bytes"`
	// ExchangeTimeout is how long an exchange may go without progress: no
	// byte of its request or response moved to or from the client, across
	// the tunnel or to or from the server (a server computing its answer, a
	// client that stops reading, a tunnel that carries nothing of it). A
	// response that keeps flowing is not cut, however long a slow link takes
	// to carry it (exchange_max_duration bounds that). A backstop, not a
	// service target: the gateway should never cut a call its client would
	// still wait for, and SOAP clients wait 60s (Axis2, CXF, WCF), 100s
	// (.NET), 10m (Axis 1) or without limit (zeep, gSOAP) for a read by
	// default. A client that gives up first ends its exchange itself when it
	// resets its connection. Keep it the same on both gateways. Default: 10m.
	ExchangeTimeout time.Duration `yaml:"exchange_timeout"`
	// ExchangeMaxDuration bounds an exchange however steadily its bytes
	// move: it only stops a peer trickling bytes forever. Keep it the same
	// on both gateways. Default: 24h.
	ExchangeMaxDuration time.Duration `yaml:"exchange_max_duration"`
	// MaxConcurrentExchanges caps the exchanges in flight in this process.
	// Default: 4096.
	MaxConcurrentExchanges int `yaml:"max_concurrent_exchanges"`
	// IdleTimeout closes a client keep-alive connection that has been idle
	// this long. Default: 90s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxClientConnections caps the client connections an edge holds open,
	// across its listeners; one more gets a 503 Fault and is closed
	// (soapgw_edge_client_connections_refused_total). Default: 10000.
	MaxClientConnections int `yaml:"max_client_connections"`
	// AllowAbsoluteForm accepts absolute-form request targets
	// ("POST http://host/path HTTP/1.1") from clients configured to use a
	// forward proxy; they are routed by the URI's host and path and forwarded
	// unchanged. Default: false (400 Fault: soapgw is not a forward proxy).
	AllowAbsoluteForm bool `yaml:"allow_absolute_form"`
	// FaultStatus is the HTTP status of the SOAP Faults the gateway makes
	// itself; one of [FaultStatuses]. "soap": the SOAP HTTP bindings' status,
	// which every SOAP stack reads a Fault from: 500 for every SOAP 1.1 Fault,
	// and for SOAP 1.2 400 (env:Sender, the client's fault) or 500
	// (env:Receiver). "http": the HTTP-semantic status (502, 503, 504, 413,
	// 404, ...) for load balancers and scripts that act on it. Either way
	// the HTTP-semantic status is in the X-Soapgw-Status header and the cause
	// in X-Soapgw-Error; server responses are never changed. Only the edge
	// renders Faults (the origin reports its errors to the edge), so only
	// an edge's setting matters. Reloaded on SIGHUP. Default: "soap".
	FaultStatus string `yaml:"fault_status"`
}

// CodecConfig tunes the message codecs. Which codec a message uses is chosen
// per peer (edge.peers[].codec), per route (edge.routes[].codec) and for
// responses at the origin (origin.codec).
type CodecConfig struct {
	// GzipLevel is the gzip level, 1 (fastest) to 9 (smallest). Default: 6.
	GzipLevel int `yaml:"gzip_level"`
	// ZstdLevel is the zstd level, 1 to 22 (mapped to the encoder's four
	// speeds: 1 fastest, 2-5 default, 6-9 better, 10+ best). Default: 3.
	ZstdLevel int `yaml:"zstd_level"`
	// ZstdDictionary is "builtin" (a dictionary trained on SOAP traffic,
	// shipped in the binary) or "none". Both gateways must agree.
	// Default: builtin.
	ZstdDictionary string `yaml:"zstd_dictionary"`
	// TokenDictionary is the token codec's dictionary budget per tunnel
	// connection and direction; the receiving side adopts the sender's.
	// The match history (earlier messages' tokens) takes up to twice as
	// much again, grown only as traffic needs it. 4KiB to 64MiB.
	// Default: 1MiB.
	TokenDictionary ByteSize `yaml:"token_dictionary"`
	// AutoMinSize: under "auto", messages (envelope head and body) smaller
	// than this travel uncoded. Default: 0 (code everything: with state
	// shared across messages even small ones shrink; see docs/codecs.md).
	AutoMinSize ByteSize `yaml:"auto_min_size"`
	// MaxCodedMessage is the largest message that is buffered and coded
	// whole; larger ones are coded as they stream (zstd-streaming, see
	// docs/codecs.md). Default: 1MiB.
	MaxCodedMessage ByteSize `yaml:"max_coded_message"`
	// Retention is how many bytes of sent coded messages a tunnel
	// connection keeps until the peer confirms it decoded them, so that a
	// message the peer could not decode is sent again uncoded. When full,
	// messages travel uncoded. Default: 8MiB.
	Retention ByteSize `yaml:"retention"`
	// UDPWindow is, on the UDP tunnel, how many messages coded with the
	// token or zstd-stream state may await the peer's acknowledgement at
	// once (internal/tunnel/quic/SPEC.md). 1: a lost packet delays no other
	// message, and concurrent messages are coded on their own (larger). More:
	// concurrent messages keep the shared state's compression, and one may
	// wait for up to that many earlier ones after a loss. 0 (auto): 16 while
	// the path loses almost no packets, 1 while it does. 0 to 64. Default: 0.
	UDPWindow int `yaml:"udp_window"`
}

// EdgeConfig configures the edge role.
type EdgeConfig struct {
	// Listeners are the sockets SOAP clients connect to. Required, >= 1.
	Listeners []Listener `yaml:"listeners"`
	// Peers are the origin gateways this edge tunnels to. Required, >= 1.
	Peers []Peer `yaml:"peers"`
	// Routes map a request to a peer and an upstream. The proxy decides how
	// routes are matched. Required, >= 1.
	Routes []Route `yaml:"routes"`
	// OneWay acknowledges the operations it lists at once (202 Accepted)
	// from a durable spool and delivers them in the background, exactly once
	// with the origin's ledger (docs/operations.md, "One-way messages"). Off
	// when absent: every call is synchronous.
	OneWay *EdgeOneWay `yaml:"one_way,omitempty"`
}

// EdgeOneWay configures one-way messaging at the edge.
type EdgeOneWay struct {
	// Spool is the file of the durable spool (a bbolt database, created if
	// missing; one edge process per file). Required.
	Spool string `yaml:"spool"`
	// MaxBytes bounds the pending messages' bytes; a message over it is
	// refused with a spool_full Fault. Default: 256MiB.
	MaxBytes ByteSize `yaml:"max_bytes"`
	// MaxMessages bounds the pending messages. Default: 100000.
	MaxMessages int `yaml:"max_messages"`
	// MaxDeadLetters bounds the dead letters kept (messages the server
	// refused, and those in doubt); the oldest go first. Default: 10000.
	MaxDeadLetters int `yaml:"max_dead_letters"`
	// DeadLetters keeps refused and in-doubt messages for `soapgw spool`;
	// false drops them (logged and counted). Default: true.
	DeadLetters bool `yaml:"dead_letters"`
	// AcceptStatus is the edge's answer to a one-way call, always with an
	// empty body: 202 (WS-I Basic Profile) or 200. Keep 202 unless clients
	// need 200: zeep takes an empty 202 as success and fails on an empty 200.
	// Default: 202.
	AcceptStatus int `yaml:"accept_status"`
	// Deliveries is how many messages are in flight to the origin at once (at
	// most 32 MiB of them): a link carries at most this many per round trip.
	// The origin sends at most its one_way.max_concurrent of them to the
	// server at once. 1 to 4096. Default: 1024 (what fills a lossy GPRS link).
	// Deliveries never take the last thirty-second of a tunnel connection's
	// streams (origin.max_streams), which stay free for synchronous calls:
	// beyond that they wait for one of theirs to end.
	Deliveries int `yaml:"deliveries"`
	// Ordered delivers one message at a time per upstream, in the order
	// the edge accepted them. Default: false.
	Ordered bool `yaml:"ordered"`
	// RetryMax caps the wait between attempts while an origin or server is
	// unavailable (100 ms first, doubled each time). Default: 30s.
	RetryMax time.Duration `yaml:"retry_max"`
	// Operations are the one-way operations. Required, >= 1.
	Operations []OneWayOperation `yaml:"operations"`
}

// OneWayOperation marks requests as one-way. At least one of action and
// operation is set; all that are set must match. Or wsdl names a WSDL whose
// one-way operations are all marked (Expand).
type OneWayOperation struct {
	// PathPrefix limits the match to request targets starting with it.
	PathPrefix string `yaml:"path_prefix,omitempty"`
	// Action is the SOAPAction (SOAP 1.1) or the Content-Type's action
	// parameter (SOAP 1.2), without quotes, compared exactly.
	Action string `yaml:"action,omitempty"`
	// Operation is the local name of the first element in the SOAP Body.
	Operation string `yaml:"operation,omitempty"`
	// WSDL is a WSDL 1.1 file of the service: each of its one-way operations
	// (an input and no output) is marked, by the first element of its SOAP
	// Body (and its SOAPAction where the element alone does not tell it from
	// another operation). Exclusive with action and operation; read at start.
	WSDL string `yaml:"wsdl,omitempty"`
}

// Expand returns the operations o marks: o itself, or with WSDL one per one-way
// operation of the WSDL (with o's path_prefix), and their WSDL names.
func (o OneWayOperation) Expand() (ops []OneWayOperation, names []string, err error) {
	if o.WSDL == "" {
		return []OneWayOperation{o}, nil, nil
	}
	data, err := readLimited(o.WSDL, wsdl.MaxSize)
	if err != nil {
		return nil, nil, err
	}
	found, err := wsdl.OneWay(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", o.WSDL, err)
	}
	for _, f := range found {
		ops = append(ops, OneWayOperation{PathPrefix: o.PathPrefix, Action: f.Action, Operation: f.BodyElement})
		names = append(names, f.Name)
	}
	return ops, names, nil
}

// readLimited reads a file of at most max bytes.
func readLimited(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, max)
	}
	return data, nil
}

func (o *EdgeOneWay) setDefaults() {
	o.MaxBytes = 256 << 20
	o.MaxMessages = 100_000
	o.MaxDeadLetters = 10_000
	o.DeadLetters = true
	o.AcceptStatus = 202
	o.Deliveries = 1024
	o.RetryMax = 30 * time.Second
}

// OriginOneWay configures one-way deliveries at the origin.
type OriginOneWay struct {
	// Ledger is the file recording the one-way messages delivered to the
	// server (a bbolt database, created if missing). Required.
	Ledger string `yaml:"ledger"`
	// Retention is how long a delivered message's id is remembered: longer
	// than an edge may keep a delivered message before it learns so (its
	// longest outage). Default: 168h.
	Retention time.Duration `yaml:"retention"`
	// InDoubt is what happens to a message whose earlier delivery reached
	// the server without an answer coming back (origin killed, server
	// silent): "hold" (the default) never sends it again (at most once; the
	// edge keeps it as a dead letter), "redeliver" sends it again (at least
	// once).
	InDoubt string `yaml:"in_doubt"`
	// MaxConcurrent bounds the one-way deliveries sent to the servers at once;
	// edges keep many more in flight to fill their links, which wait here.
	// 1 to 4096. Default: 16.
	MaxConcurrent int `yaml:"max_concurrent"`
}

// InDoubt values.
const (
	InDoubtHold      = "hold"
	InDoubtRedeliver = "redeliver"
)

func (o *OriginOneWay) setDefaults() {
	o.Retention = 168 * time.Hour
	o.InDoubt = InDoubtHold
	o.MaxConcurrent = 16
}

// Listener is one socket accepting HTTP/1.0 and HTTP/1.1 SOAP clients.
type Listener struct {
	// Name identifies the listener in routes, logs and metrics. Required,
	// unique, [A-Za-z0-9._-]+.
	Name string `yaml:"name"`
	// Listen is the host:port to listen on; the host may be empty for all
	// interfaces. Required.
	Listen string `yaml:"listen"`
	// TLS makes the listener speak HTTPS, for clients configured with an
	// https URL: cert_file and key_file are the certificate the clients
	// verify (for the name they call); with ca_file, every client must
	// present a certificate signed by it (mutual TLS). PEM files, read
	// again within seconds when they change. Optional: plain HTTP.
	TLS *TLS `yaml:"tls,omitempty"`
}

// Peer is one origin gateway reached over a tunnel.
type Peer struct {
	// Name identifies the peer in routes, logs and metrics. Required,
	// unique, [A-Za-z0-9._-]+.
	Name string `yaml:"name"`
	// Address is the host:port of the origin's tunnel listener. Required.
	Address string `yaml:"address"`
	// Transport carries the tunnel: "tcp" (multiplexed TCP connections)
	// or "udp" (QUIC: no head-of-line blocking between exchanges after a
	// loss, connections that survive an address change; the origin's UDP
	// listener is on the same port as its TCP one unless it sets
	// udp_listen). Default: "tcp".
	Transport string `yaml:"transport"`
	// Fallback, with transport udp, names a transport to carry the traffic
	// while UDP does not get through (networks that drop UDP): "tcp" keeps
	// a TCP tunnel to the same address up beside the UDP one and uses it
	// while no UDP connection is up; UDP is retried all along and takes
	// over again when it connects. With it the origin also sends large
	// responses (64 KiB or more) over TCP while the UDP path loses packets:
	// QUIC's congestion control crawls under random loss where TCP's does
	// not. Default: "" (none).
	Fallback string `yaml:"fallback,omitempty"`
	// Redundancy, with transport udp, says when every message that fits one
	// packet is sent twice: on its QUIC stream and, a few milliseconds later,
	// as a QUIC datagram; the origin answers the same way. A lost packet then
	// rarely costs QUIC's probe timeout (RTT + 25 ms and more): p99 latency on
	// lossy links drops towards one RTT, for about twice the bytes of small
	// messages. Each message still runs exactly once. "auto" sends copies
	// while the peer reports more than 0.5 % of a gateway's packets lost (until
	// under 0.2 %, at least 30 s later), "on" always, "off" never (true and
	// false are read as on and off). One-way deliveries are never copied.
	// Default: auto.
	Redundancy string `yaml:"redundancy,omitempty"`
	// Connections is how many tunnel connections are kept open to this
	// peer; exchanges are spread over them. 1..64. Default: 2.
	Connections int `yaml:"connections"`
	// MaxConnections is how many tunnel connections the edge may open to
	// this peer when every one of its connections is at the origin's stream
	// limit: rather than refusing the exchange, it waits for a free stream
	// and opens one more connection at a time, up to this many, closing
	// the extra ones after 30 s without exchanges. Only transport tcp (a
	// QUIC connection waits for stream credit instead). connections..64.
	// Default: 8, or connections if that is more.
	MaxConnections int `yaml:"max_connections,omitempty"`
	// Codec encodes the requests sent to this peer; one of [CodecNames].
	// The origin must support it, else the best codec both know is used.
	// Default: "auto".
	Codec string `yaml:"codec"`
	// DialTimeout bounds one attempt to connect to the peer. Default: 5s.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// KeepaliveInterval is how often an idle tunnel is pinged.
	// Default: 15s.
	KeepaliveInterval time.Duration `yaml:"keepalive_interval"`
	// KeepaliveTimeout is how long a ping may go unanswered before the
	// tunnel connection is declared dead. Default: 10s.
	KeepaliveTimeout time.Duration `yaml:"keepalive_timeout"`
	// RTOMin is the minimum TCP retransmission timeout of the tunnel's
	// sockets (Linux >= 6.14; elsewhere the kernel's 200 ms stays and a
	// warning is logged). A lost segment that is the last in flight waits
	// for 2 x RTT + this before it is sent again, so the kernel's 200 ms
	// dominates p99 latency on lossy links. Up to 200ms (the kernel default,
	// which turns the tuning off). Default: 20ms.
	RTOMin time.Duration `yaml:"rto_min"`
	// Auth proves this edge to the origin with a shared key (and checks the
	// origin holds it too), over TLS 1.3. One of auth, tls with a client
	// certificate (mutual TLS), or insecure: true is required.
	Auth *Auth `yaml:"auth,omitempty"`
	// TLS verifies the origin's certificate against ca_file (or the system
	// roots) and, with cert_file and key_file, presents a client certificate
	// (mutual TLS). May be combined with auth. Optional.
	TLS *TLS `yaml:"tls,omitempty"`
	// Insecure runs this tunnel in plaintext without authentication. The
	// origin must say insecure: true too. Only for links nobody else can
	// reach; the process warns at start and exports
	// soapgw_tunnel_insecure 1. Default: false.
	Insecure bool `yaml:"insecure,omitempty"`
}

// Auth authenticates tunnel connections with a shared key: TLS 1.3, then
// each side proves it holds the key with an HMAC bound to the connection
// (internal/peerauth/SPEC.md). The key never travels. Exactly one of
// key_file and key. Make a key with `soapgw keygen`.
type Auth struct {
	// KeyFile holds one key per line (base64 or hex, at least 32 bytes); the
	// first line proves this side, every line is accepted from the other
	// side, so keys rotate without a failed handshake. Re-read when the
	// file changes or on SIGHUP.
	KeyFile string `yaml:"key_file,omitempty"`
	// Key is one key inline, typically "${SOAPGW_TUNNEL_KEY}" from the
	// environment. Never printed by config check.
	Key Secret `yaml:"key,omitempty"`
}

// TLS secures tunnel connections with TLS 1.3. On an edge peer it verifies
// the origin and may present a client certificate; on an origin it presents
// the server certificate and, with ca_file, requires and verifies client
// certificates from edges. On an upstream (https) it verifies the server as
// an edge peer verifies its origin; on an edge listener it serves HTTPS to
// clients as an origin serves edges. Files are PEM.
type TLS struct {
	// CertFile is this gateway's certificate chain. Required on an origin;
	// optional on an edge (then it is the client certificate).
	CertFile string `yaml:"cert_file,omitempty"`
	// KeyFile is the private key of CertFile. Required with CertFile.
	KeyFile string `yaml:"key_file,omitempty"`
	// CAFile holds the certificates that sign the other side's certificate.
	// On an edge: the origin's CA (default: the system roots). On an
	// origin: when set, every edge must present a client certificate signed
	// by it. Optional.
	CAFile string `yaml:"ca_file,omitempty"`
	// ServerName is the name the edge expects in the origin's certificate
	// (an origin, in an upstream's). Edge peers and upstreams only. Default:
	// the host of the peer's address (the upstream's URL).
	ServerName string `yaml:"server_name,omitempty"`
}

// Route selects the peer and the upstream for a request. Empty optional
// fields match everything.
type Route struct {
	// Listener restricts the route to requests arriving on the listener of
	// that name. Optional. Default: "" (any listener).
	Listener string `yaml:"listener,omitempty"`
	// PathPrefix restricts the route to request paths starting with it.
	// Must start with "/". Default: "/".
	PathPrefix string `yaml:"path_prefix"`
	// Host restricts the route to requests whose Host header equals it,
	// case-insensitively; when it has no port, the request's port is
	// ignored. Optional. Default: "" (any host).
	Host string `yaml:"host,omitempty"`
	// Peer names the peer that carries the exchange. Required.
	Peer string `yaml:"peer"`
	// Upstream names the upstream at the origin that serves the exchange.
	// The edge cannot check that it exists there. Required,
	// [A-Za-z0-9._-]+.
	Upstream string `yaml:"upstream"`
	// Codec overrides the peer's codec for the requests of this route; one
	// of [CodecNames]. Optional. Default: "" (the peer's).
	Codec string `yaml:"codec,omitempty"`
}

// OriginConfig configures the origin role.
type OriginConfig struct {
	// Listen is the host:port accepting tunnel connections. Required.
	Listen string `yaml:"listen"`
	// UDPListen is the host:port (UDP) accepting UDP tunnel connections,
	// authenticated like the TCP ones; "off" turns it off. Default: "" (the
	// same address as listen).
	UDPListen string `yaml:"udp_listen,omitempty"`
	// Upstreams are the real SOAP services, named by routes at the edge.
	// Required, >= 1.
	Upstreams []Upstream `yaml:"upstreams"`
	// MaxConnections caps the authenticated tunnel connections at once.
	// Default: 256.
	MaxConnections int `yaml:"max_connections"`
	// MaxStreams is how many exchanges one tunnel connection may carry at
	// once. An edge whose connections are all full waits for a free stream
	// and opens more connections (its peers[].max_connections). 1..65535.
	// Each exchange may hold up to 256 KiB of its request unread (its
	// stream window). Default: 1024.
	MaxStreams int `yaml:"max_streams,omitempty"`
	// Codec encodes the responses sent back to edges; one of [CodecNames].
	// The edge must support it, else the best codec both know is used.
	// Default: "auto".
	Codec string `yaml:"codec"`
	// RTOMin is the minimum TCP retransmission timeout of the tunnel
	// connections it accepts (Linux >= 6.14; elsewhere the kernel's 200 ms stays and a
	// warning is logged). A lost segment that is the last in flight waits
	// for 2 x RTT + this before it is sent again, so the kernel's 200 ms
	// dominates p99 latency on lossy links. Up to 200ms (the kernel default,
	// which turns the tuning off). Default: 20ms.
	RTOMin time.Duration `yaml:"rto_min"`
	// Auth accepts edges that prove they hold a shared key, over TLS 1.3
	// (with a certificate the origin makes for itself unless tls gives one).
	// One of auth, tls.ca_file (mutual TLS), or insecure: true is required:
	// an origin never serves anonymous edges by default.
	Auth *Auth `yaml:"auth,omitempty"`
	// TLS gives the origin's certificate (cert_file and key_file); with
	// ca_file, edges must present client certificates signed by it (mutual
	// TLS). May be combined with auth (both must pass). Optional.
	TLS *TLS `yaml:"tls,omitempty"`
	// Insecure accepts plaintext, unauthenticated tunnels: anyone who
	// reaches listen can call every upstream. Only for links nobody else can
	// reach; the edges must say insecure: true too. The process warns at
	// start and exports soapgw_tunnel_insecure 1. Default: false.
	Insecure bool `yaml:"insecure,omitempty"`
	// HandshakeTimeout bounds a new tunnel connection's handshake (TLS,
	// key proof and HELLO); a connection that has not finished by then is
	// closed. Default: 5s.
	HandshakeTimeout time.Duration `yaml:"handshake_timeout"`
	// MaxHandshakes bounds the connections in their handshake at once.
	// Unauthenticated connections hold no max_connections slot; when this
	// budget is full, the oldest handshake of the address holding the most
	// is closed to make room. Default: 256.
	MaxHandshakes int `yaml:"max_handshakes"`
	// MaxHandshakesPerSource bounds those from one IP address; beyond it
	// that address's oldest handshake is closed. Default: 16.
	MaxHandshakesPerSource int `yaml:"max_handshakes_per_source"`
	// ResumeWindow is how long the origin keeps a finished exchange's
	// response for an edge whose tunnel connection died to collect on
	// another: the client then gets its real answer, and the server runs the
	// call once. Long enough for a dead connection to be noticed and
	// replaced (the edge's keepalive: up to 25 s). 0s turns resuming off
	// (a cut then ends such an exchange with outcome_unknown). Default: 30s.
	ResumeWindow time.Duration `yaml:"resume_window"`
	// ResumeMaxBytes bounds the responses held for resumes, all together;
	// one response may use an eighth of it, a larger one is not resumable.
	// The oldest finished ones make room first. Default: 64MiB.
	ResumeMaxBytes ByteSize `yaml:"resume_max_bytes"`
	// OneWay lets edges deliver one-way messages here (see edge.one_way).
	// Off when absent: such deliveries are refused and the edges keep them.
	OneWay *OriginOneWay `yaml:"one_way,omitempty"`
}

// Upstream is one real SOAP service behind the origin.
type Upstream struct {
	// Name is what edge routes refer to. Required, unique, [A-Za-z0-9._-]+.
	Name string `yaml:"name"`
	// URL is http://host[:port] or https://host[:port], without path,
	// query, fragment or user info: the client's request target is
	// forwarded unchanged. Required.
	URL string `yaml:"url"`
	// HTTPVersion is the protocol spoken to the upstream: "1.1" or "1.0".
	// A "1.0" upstream gets HTTP/1.0 requests with Content-Length, never
	// chunked bodies. Default: "1.1".
	HTTPVersion string `yaml:"http_version"`
	// Chunked says whether the upstream accepts chunked request bodies.
	// false: a request body of unknown length (the client sent it chunked)
	// is read whole, up to limits.max_request_bytes, and sent with a
	// Content-Length, which every HTTP/1.x server reads; a larger one is
	// refused (413 request_too_large) before any of it reaches the upstream.
	// true: such a body streams to the upstream chunked, as it arrives:
	// less memory and latency for bodies of megabytes, but only for servers
	// that read chunked bodies (many SOAP stacks speaking HTTP/1.1 do not),
	// and a body over the limit is cut where it passes it (the upstream gets
	// part of it, never its last chunk). Bodies with a Content-Length are
	// always sent as they are. Must be false for "1.0". Default: false.
	Chunked *bool `yaml:"chunked"`
	// HostHeader is "preserve" (forward the client's Host byte for byte) or
	// "upstream" (rewrite it to the host[:port] of URL).
	// Default: "preserve".
	HostHeader string `yaml:"host_header"`
	// ConnectTimeout bounds connecting (and the TLS handshake) to the
	// upstream. Default: 5s.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// ResponseTimeout bounds the wait for the response head after the
	// request was sent; past it the client gets 504 upstream_timeout. 0: no
	// bound of its own, only limits.exchange_timeout (and the client going
	// away, and the drain). Set it only for a service known to answer
	// quickly, to fail fast when it hangs. Default: 0 (none).
	ResponseTimeout time.Duration `yaml:"response_timeout"`
	// IdleTimeout closes a pooled keep-alive connection idle this long.
	// Default: 60s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// PoolSize is the number of idle keep-alive connections kept; 0 closes
	// every connection after use. Default: 64.
	PoolSize int `yaml:"pool_size"`
	// InsecureSkipVerify disables certificate verification. https only.
	// Default: false.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
	// TLS, for an https URL: ca_file verifies the server's certificate
	// against a private CA instead of the system roots; cert_file and
	// key_file present a client certificate (servers that require mutual
	// TLS); server_name is the name expected in the server's certificate
	// (default: the URL's host). Rotated files take effect for new upstream
	// connections within seconds. Optional.
	TLS *TLS `yaml:"tls,omitempty"`
}

// Default returns the documented defaults of the top-level, admin and
// limits sections. It configures no role.
func Default() *Config {
	node, err := os.Hostname()
	if err != nil || node == "" {
		node = "soapgw"
	}
	return &Config{
		Node:         node,
		DrainTimeout: 15 * time.Second,
		Limits: Limits{
			MaxRequestBytes:        32 * MiB,
			MaxResponseBytes:       64 * MiB,
			MaxHeaderBytes:         64 * KiB,
			ExchangeTimeout:        10 * time.Minute,
			ExchangeMaxDuration:    24 * time.Hour,
			MaxConcurrentExchanges: 4096,
			IdleTimeout:            90 * time.Second,
			MaxClientConnections:   10000,
			FaultStatus:            FaultStatusSOAP,
		},
		Codecs: CodecConfig{
			GzipLevel:       6,
			ZstdLevel:       3,
			ZstdDictionary:  "builtin",
			TokenDictionary: 1 * MiB,
			MaxCodedMessage: 1 * MiB,
			Retention:       8 * MiB,
		},
	}
}

// defaulter is implemented by the types whose zero value is not their
// default. The decoder calls setDefaults on every value it allocates before
// decoding the YAML over it.
type defaulter interface {
	setDefaults()
}

// UDPAddress is the address of the UDP tunnel listener, or "" when it is off.
func (o *OriginConfig) UDPAddress() string {
	switch o.UDPListen {
	case UDPListenOff:
		return ""
	case "":
		return o.Listen
	}
	return o.UDPListen
}

func (o *OriginConfig) setDefaults() {
	o.MaxConnections = 256
	o.HandshakeTimeout = 5 * time.Second
	o.MaxHandshakes = 256
	o.MaxHandshakesPerSource = 16
	o.ResumeWindow = 30 * time.Second
	o.ResumeMaxBytes = 64 << 20
	o.Codec = "auto"
	o.RTOMin = DefaultRTOMin
}

// RedundancyMode is [Peer.Redundancy] as one of auto, on, off.
func (p *Peer) RedundancyMode() string {
	switch p.Redundancy {
	case RedundancyOn, "true":
		return RedundancyOn
	case RedundancyOff, "false":
		return RedundancyOff
	}
	return RedundancyAuto
}

// MaxConnectionsOrDefault is MaxConnections, or its default when unset.
func (p *Peer) MaxConnectionsOrDefault() int {
	if p.MaxConnections > 0 {
		return p.MaxConnections
	}
	return max(DefaultPeerMaxConnections, p.Connections)
}

// DefaultPeerMaxConnections is edge.peers[].max_connections when unset.
const DefaultPeerMaxConnections = 8

func (p *Peer) setDefaults() {
	p.Transport = TransportTCP
	p.Connections = 2
	p.Codec = "auto"
	p.DialTimeout = 5 * time.Second
	p.KeepaliveInterval = 15 * time.Second
	p.KeepaliveTimeout = 10 * time.Second
	p.RTOMin = DefaultRTOMin
}

// DefaultRTOMin is the default minimum RTO of tunnel sockets: a few jiffies, above
// the 2 x RTT a probe adds, well below the kernel's 200 ms.
const DefaultRTOMin = 20 * time.Millisecond

// MaxRTOMin is the largest rto_min accepted: the kernel's own minimum.
const MaxRTOMin = 200 * time.Millisecond

func (r *Route) setDefaults() {
	r.PathPrefix = "/"
}

func (u *Upstream) setDefaults() {
	u.HTTPVersion = HTTP11
	u.HostHeader = HostHeaderPreserve
	u.ConnectTimeout = 5 * time.Second
	u.IdleTimeout = 60 * time.Second
	u.PoolSize = 64
}

// setDerivedDefaults fills the defaults that depend on other fields; it
// runs after decoding.
func (c *Config) setDerivedDefaults() {
	if c.Origin == nil {
		return
	}
	for i := range c.Origin.Upstreams {
		u := &c.Origin.Upstreams[i]
		if u.Chunked == nil {
			chunked := u.AcceptsChunked()
			u.Chunked = &chunked
		}
	}
}

// AcceptsChunked reports whether request bodies may be sent chunked: the
// value of Chunked, false when it is nil. Only the operator can say: an
// HTTP/1.1 status line does not promise that the stack behind it reads
// chunked bodies, and a failed first call is not a way to find out.
func (u Upstream) AcceptsChunked() bool {
	return u.Chunked != nil && *u.Chunked
}

// HTTPS reports whether the upstream is reached over https.
func (u Upstream) HTTPS() bool {
	p, err := url.Parse(u.URL)
	return err == nil && p.Scheme == "https"
}

// HostPort returns the host:port to dial for the upstream, with the port
// defaulted to 80 for http and 443 for https. It returns "" when URL does
// not parse; a validated Config never has such a URL.
func (u Upstream) HostPort() string {
	p, err := url.Parse(u.URL)
	if err != nil || p.Hostname() == "" {
		return ""
	}
	port := p.Port()
	if port == "" {
		port = "80"
		if p.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(p.Hostname(), port)
}

// URLHost returns the host[:port] of URL exactly as written: the Host
// header sent when HostHeader is "upstream", and the TLS server name's
// source. It returns "" when URL does not parse.
func (u Upstream) URLHost() string {
	p, err := url.Parse(u.URL)
	if err != nil {
		return ""
	}
	return p.Host
}

// Marshal returns the effective configuration as YAML, defaults included.
// Parsing the result yields an equal Config. Values that came from
// environment variables appear expanded.
func (c *Config) Marshal() ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("config: marshal: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("config: marshal: %w", err)
	}
	return buf.Bytes(), nil
}

// Secret is a configuration value that must not be printed: Marshal (config
// check) shows it as "(secret)".
type Secret string

// MarshalYAML hides the value.
func (s Secret) MarshalYAML() (any, error) {
	if s == "" {
		return "", nil
	}
	return "(secret)", nil
}
