package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/soapgw/soapgw/internal/peerauth"
)

const missing = "missing required field"

// nameRE is the syntax of listener, peer and upstream names: they appear
// in routes, logs and metric labels.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// Validate checks fields and their relations on a Config whose defaults
// are filled in. It returns nil, an *Error or an errors.Join of *Error
// values carrying Path and Msg; [Parse] adds file and line.
func (c *Config) Validate() error {
	var errs errorList
	if c.Edge == nil && c.Origin == nil {
		errs.add("", "no role configured: add an edge section, an origin section, or both")
	}
	checkNode(&errs, c.Node)
	if c.Admin.Listen != "" {
		checkAddr(&errs, "admin.listen", c.Admin.Listen, false)
	}
	checkNonNegative(&errs, "drain_timeout", c.DrainTimeout)
	c.Limits.validate(&errs)
	c.Codecs.validate(&errs)
	if c.Edge != nil {
		c.Edge.validate(&errs)
	}
	if c.Origin != nil {
		c.Origin.validate(&errs)
	}
	c.checkListenCollisions(&errs)
	return errs.join()
}

func checkNode(errs *errorList, node string) {
	switch {
	case node == "":
		errs.add("node", "must not be empty")
	case len(node) > 255:
		errs.add("node", "longer than 255 bytes")
	case strings.IndexFunc(node, func(r rune) bool { return r <= ' ' || r >= 0x7f }) >= 0:
		errs.add("node", "%q contains spaces or non-printable characters", node)
	}
}

func (l *Limits) validate(errs *errorList) {
	checkPositiveSize(errs, "limits.max_request_bytes", l.MaxRequestBytes)
	checkPositiveSize(errs, "limits.max_response_bytes", l.MaxResponseBytes)
	checkPositiveSize(errs, "limits.max_header_bytes", l.MaxHeaderBytes)
	checkPositive(errs, "limits.exchange_timeout", l.ExchangeTimeout)
	checkPositive(errs, "limits.exchange_max_duration", l.ExchangeMaxDuration)
	if l.ExchangeMaxDuration > 0 && l.ExchangeMaxDuration < l.ExchangeTimeout {
		errs.add("limits.exchange_max_duration", "must be at least limits.exchange_timeout (%s), got %s", l.ExchangeTimeout, l.ExchangeMaxDuration)
	}
	if l.MaxConcurrentExchanges < 1 {
		errs.add("limits.max_concurrent_exchanges", "must be at least 1, got %d", l.MaxConcurrentExchanges)
	}
	checkPositive(errs, "limits.idle_timeout", l.IdleTimeout)
	if l.MaxClientConnections < 1 {
		errs.add("limits.max_client_connections", "must be at least 1, got %d", l.MaxClientConnections)
	}
	checkOneOf(errs, "limits.fault_status", "fault status", l.FaultStatus, FaultStatuses)
}

func (o *EdgeOneWay) validate(errs *errorList) {
	const p = "edge.one_way"
	if o.Spool == "" {
		errs.add(p+".spool", missing)
	}
	if o.MaxBytes < 64<<10 {
		errs.add(p+".max_bytes", "must be at least 64KiB, got %d", int64(o.MaxBytes))
	}
	if o.MaxMessages < 1 {
		errs.add(p+".max_messages", "must be at least 1, got %d", o.MaxMessages)
	}
	if o.MaxDeadLetters < 1 {
		errs.add(p+".max_dead_letters", "must be at least 1, got %d", o.MaxDeadLetters)
	}
	if o.AcceptStatus != 200 && o.AcceptStatus != 202 {
		errs.add(p+".accept_status", "must be 202 or 200, got %d", o.AcceptStatus)
	}
	if o.Deliveries < 1 || o.Deliveries > 4096 {
		errs.add(p+".deliveries", "must be 1 to 4096, got %d", o.Deliveries)
	}
	if o.RetryMax < 100*time.Millisecond {
		errs.add(p+".retry_max", "must be at least 100ms, got %s", o.RetryMax)
	}
	if len(o.Operations) == 0 {
		errs.add(p+".operations", "at least one operation is required")
	}
	for i, op := range o.Operations {
		key := fmt.Sprintf("%s.operations[%d]", p, i)
		switch {
		case op.WSDL != "" && (op.Action != "" || op.Operation != ""):
			errs.add(key+".wsdl", "exclusive with action and operation: the WSDL names its operations")
		case op.WSDL != "":
			if _, _, err := op.Expand(); err != nil {
				errs.add(key+".wsdl", "%v", err)
			}
		case op.Action == "" && op.Operation == "":
			errs.add(key, "set action, operation, both, or wsdl")
		}
	}
}

func (e *EdgeConfig) validate(errs *errorList) {
	if e.OneWay != nil {
		e.OneWay.validate(errs)
	}
	listeners := make(map[string]string, len(e.Listeners))
	if len(e.Listeners) == 0 {
		errs.add("edge.listeners", "at least one listener is required")
	}
	for i, l := range e.Listeners {
		p := fmt.Sprintf("edge.listeners[%d]", i)
		checkName(errs, p+".name", l.Name, listeners, p)
		checkAddr(errs, p+".listen", l.Listen, false)
		if l.TLS != nil {
			l.TLS.validate(errs, p+".tls", true)
		}
	}

	peers := make(map[string]string, len(e.Peers))
	if len(e.Peers) == 0 {
		errs.add("edge.peers", "at least one peer is required")
	}
	for i, peer := range e.Peers {
		p := fmt.Sprintf("edge.peers[%d]", i)
		checkName(errs, p+".name", peer.Name, peers, p)
		checkAddr(errs, p+".address", peer.Address, true)
		checkOneOf(errs, p+".transport", "transport", peer.Transport, Transports)
		if peer.Redundancy != "" {
			checkOneOf(errs, p+".redundancy", "redundancy", peer.Redundancy, RedundancyModes)
			if peer.RedundancyMode() == RedundancyOn && peer.Transport != TransportUDP {
				errs.add(p+".redundancy", "only applies to transport: udp")
			}
		}
		if peer.Fallback != "" {
			checkOneOf(errs, p+".fallback", "fallback", peer.Fallback, Fallbacks[1:])
			if peer.Transport != TransportUDP {
				errs.add(p+".fallback", "only applies to transport: udp")
			}
		}
		if peer.Connections < 1 || peer.Connections > 64 {
			errs.add(p+".connections", "must be from 1 to 64, got %d", peer.Connections)
		}
		if peer.MaxConnections != 0 && (peer.MaxConnections < peer.Connections || peer.MaxConnections > 64) {
			errs.add(p+".max_connections", "must be from connections (%d) to 64, got %d", peer.Connections, peer.MaxConnections)
		}
		checkOneOf(errs, p+".codec", "codec", peer.Codec, CodecNames)
		checkPositive(errs, p+".dial_timeout", peer.DialTimeout)
		checkPositive(errs, p+".keepalive_interval", peer.KeepaliveInterval)
		checkPositive(errs, p+".keepalive_timeout", peer.KeepaliveTimeout)
		checkRTOMin(errs, p+".rto_min", peer.RTOMin)
		if peer.TLS != nil {
			peer.TLS.validate(errs, p+".tls", false)
		}
		checkPeerCredentials(errs, p, peer)
	}

	if len(e.Routes) == 0 {
		errs.add("edge.routes", "at least one route is required")
	}
	type match struct{ listener, host, prefix string }
	matches := make(map[match]int, len(e.Routes))
	for i, r := range e.Routes {
		p := fmt.Sprintf("edge.routes[%d]", i)
		if r.Listener != "" {
			if _, ok := listeners[r.Listener]; !ok {
				errs.add(p+".listener", "no listener named %q in edge.listeners", r.Listener)
			}
		}
		if !strings.HasPrefix(r.PathPrefix, "/") {
			errs.add(p+".path_prefix", "must start with \"/\", got %q", r.PathPrefix)
		}
		if r.Host != "" {
			checkHostPattern(errs, p+".host", r.Host)
		}
		switch _, ok := peers[r.Peer]; {
		case r.Peer == "":
			errs.add(p+".peer", missing)
		case !ok:
			errs.add(p+".peer", "no peer named %q in edge.peers", r.Peer)
		}
		switch {
		case r.Upstream == "":
			errs.add(p+".upstream", missing)
		case !nameRE.MatchString(r.Upstream):
			errs.add(p+".upstream", "invalid upstream name %q: use only letters, digits, '.', '_' and '-'", r.Upstream)
		}
		if r.Codec != "" {
			checkOneOf(errs, p+".codec", "codec", r.Codec, CodecNames)
		}
		m := match{r.Listener, strings.ToLower(r.Host), r.PathPrefix}
		if first, dup := matches[m]; dup {
			errs.add(p, "matches the same requests as edge.routes[%d] (same listener, host and path_prefix), so it is never used", first)
		} else {
			matches[m] = i
		}
	}
}

func (c *CodecConfig) validate(errs *errorList) {
	if c.GzipLevel < 1 || c.GzipLevel > 9 {
		errs.add("codecs.gzip_level", "must be from 1 to 9, got %d", c.GzipLevel)
	}
	if c.ZstdLevel < 1 || c.ZstdLevel > 22 {
		errs.add("codecs.zstd_level", "must be from 1 to 22, got %d", c.ZstdLevel)
	}
	checkOneOf(errs, "codecs.zstd_dictionary", "zstd dictionary", c.ZstdDictionary, []string{"builtin", "none"})
	if c.TokenDictionary < 4*KiB || c.TokenDictionary > 64*MiB {
		errs.add("codecs.token_dictionary", "must be from 4KiB to 64MiB, got %d bytes", int64(c.TokenDictionary))
	}
	if c.AutoMinSize < 0 {
		errs.add("codecs.auto_min_size", "must not be negative, got %d", int64(c.AutoMinSize))
	}
	if c.MaxCodedMessage < 1*KiB || c.MaxCodedMessage > 64*MiB {
		errs.add("codecs.max_coded_message", "must be from 1KiB to 64MiB, got %d bytes", int64(c.MaxCodedMessage))
	}
	if c.Retention < c.MaxCodedMessage {
		errs.add("codecs.retention", "must be at least codecs.max_coded_message (%d bytes), got %d", int64(c.MaxCodedMessage), int64(c.Retention))
	}
	if c.UDPWindow < 0 || c.UDPWindow > 64 {
		errs.add("codecs.udp_window", "must be from 0 (auto) to 64, got %d", c.UDPWindow)
	}
}

func (o *OriginConfig) validate(errs *errorList) {
	checkAddr(errs, "origin.listen", o.Listen, false)
	if o.UDPListen != "" && o.UDPListen != UDPListenOff {
		checkAddr(errs, "origin.udp_listen", o.UDPListen, false)
	}
	if o.MaxConnections < 1 {
		errs.add("origin.max_connections", "must be at least 1, got %d", o.MaxConnections)
	}
	if o.MaxStreams < 0 || o.MaxStreams > 65535 {
		errs.add("origin.max_streams", "must be from 1 to 65535, got %d", o.MaxStreams)
	}
	checkOneOf(errs, "origin.codec", "codec", o.Codec, CodecNames)
	checkRTOMin(errs, "origin.rto_min", o.RTOMin)
	if len(o.Upstreams) == 0 {
		errs.add("origin.upstreams", "at least one upstream is required")
	}
	if o.TLS != nil {
		o.TLS.validate(errs, "origin.tls", true)
	}
	checkOriginCredentials(errs, o)
	checkPositive(errs, "origin.handshake_timeout", o.HandshakeTimeout)
	if o.MaxHandshakes < 1 {
		errs.add("origin.max_handshakes", "must be at least 1, got %d", o.MaxHandshakes)
	}
	if o.MaxHandshakesPerSource < 1 || o.MaxHandshakesPerSource > o.MaxHandshakes {
		errs.add("origin.max_handshakes_per_source", "must be from 1 to max_handshakes (%d), got %d", o.MaxHandshakes, o.MaxHandshakesPerSource)
	}
	if o.ResumeWindow < 0 {
		errs.add("origin.resume_window", "must not be negative (0s turns resuming off), got %s", o.ResumeWindow)
	}
	if o.ResumeMaxBytes < 64<<10 {
		errs.add("origin.resume_max_bytes", "must be at least 64KiB, got %d", int64(o.ResumeMaxBytes))
	}
	if w := o.OneWay; w != nil {
		if w.Ledger == "" {
			errs.add("origin.one_way.ledger", missing)
		}
		if w.Retention < time.Hour {
			errs.add("origin.one_way.retention", "must be at least 1h (it must outlast an edge's outages), got %s", w.Retention)
		}
		checkOneOf(errs, "origin.one_way.in_doubt", "in_doubt", w.InDoubt, []string{InDoubtHold, InDoubtRedeliver})
		if w.MaxConcurrent < 1 || w.MaxConcurrent > 4096 {
			errs.add("origin.one_way.max_concurrent", "must be 1 to 4096, got %d", w.MaxConcurrent)
		}
	}
	names := make(map[string]string, len(o.Upstreams))
	for i, u := range o.Upstreams {
		p := fmt.Sprintf("origin.upstreams[%d]", i)
		checkName(errs, p+".name", u.Name, names, p)
		u.validate(errs, p)
	}
}

func (u *Upstream) validate(errs *errorList, p string) {
	isHTTPS := checkURL(errs, p+".url", u.URL)
	checkOneOf(errs, p+".http_version", "http_version", u.HTTPVersion, []string{HTTP11, HTTP10})
	if u.HTTPVersion == HTTP10 && u.Chunked != nil && *u.Chunked {
		errs.add(p+".chunked", "must be false when http_version is \"1.0\": HTTP/1.0 has no chunked encoding")
	}
	checkOneOf(errs, p+".host_header", "host_header", u.HostHeader, []string{HostHeaderPreserve, HostHeaderUpstream})
	checkPositive(errs, p+".connect_timeout", u.ConnectTimeout)
	if u.ResponseTimeout < 0 {
		errs.add(p+".response_timeout", "must not be negative, got %s", u.ResponseTimeout)
	}
	checkPositive(errs, p+".idle_timeout", u.IdleTimeout)
	if u.PoolSize < 0 {
		errs.add(p+".pool_size", "must not be negative, got %d", u.PoolSize)
	}
	if u.InsecureSkipVerify && !isHTTPS && u.URL != "" {
		errs.add(p+".insecure_skip_verify", "only applies to https URLs")
	}
	if t := u.TLS; t != nil {
		switch {
		case !isHTTPS && u.URL != "":
			errs.add(p+".tls", "only applies to https URLs")
		case u.InsecureSkipVerify && (t.CAFile != "" || t.ServerName != ""):
			errs.add(p+".insecure_skip_verify", "verifies nothing: tls.ca_file and tls.server_name would be ignored")
		}
		t.validate(errs, p+".tls", false)
	}
}

// checkListenCollisions reports two listeners of this process on the same
// address, which would fail at startup with a less helpful error.
func (c *Config) checkListenCollisions(errs *errorList) {
	type listen struct{ path, addr string }
	var all []listen
	if c.Edge != nil {
		for i, l := range c.Edge.Listeners {
			all = append(all, listen{fmt.Sprintf("edge.listeners[%d].listen", i), l.Listen})
		}
	}
	if c.Origin != nil {
		all = append(all, listen{"origin.listen", c.Origin.Listen})
	}
	all = append(all, listen{"admin.listen", c.Admin.Listen})
	first := make(map[string]string, len(all))
	for _, l := range all {
		if l.addr == "" {
			continue
		}
		if prev, dup := first[l.addr]; dup {
			errs.add(l.path, "address %q is already used by %s", l.addr, prev)
			continue
		}
		first[l.addr] = l.path
	}
}

// checkName checks a required, unique name; seen maps names to the path
// of the element that first used them.
func checkName(errs *errorList, path, name string, seen map[string]string, elem string) {
	switch prev, dup := seen[name]; {
	case name == "":
		errs.add(path, missing)
	case !nameRE.MatchString(name):
		errs.add(path, "invalid name %q: use only letters, digits, '.', '_' and '-'", name)
	case dup:
		errs.add(path, "duplicate name %q (also used by %s)", name, prev)
	default:
		seen[name] = elem
	}
}

// checkAddr checks a host:port with a numeric port from 1 to 65535. A
// listen address may leave the host empty (all interfaces) and may use port
// 0 (the kernel picks a free port, which the gateway logs: useful in tests
// and demos); a dial address (needHost) may do neither.
func checkAddr(errs *errorList, path, addr string, needHost bool) {
	if addr == "" {
		errs.add(path, missing)
		return
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		var aerr *net.AddrError
		if errors.As(err, &aerr) {
			errs.add(path, "%s %q", aerr.Err, aerr.Addr)
		} else {
			errs.add(path, "invalid address %q: %v", addr, err)
		}
		return
	}
	if needHost && host == "" {
		errs.add(path, "missing host in address %q", addr)
	}
	if !needHost && port == "0" {
		return
	}
	checkPort(errs, path, port)
}

func checkPort(errs *errorList, path, port string) {
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		errs.add(path, "port %q must be a number from 1 to 65535", port)
	}
}

// checkURL checks an upstream URL and reports whether it is https.
func checkURL(errs *errorList, path, raw string) (isHTTPS bool) {
	if raw == "" {
		errs.add(path, missing)
		return false
	}
	u, err := url.Parse(raw)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		errs.add(path, "invalid URL %q: %v", raw, err)
		return false
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		errs.add(path, "URL %q must start with http:// or https://", raw)
		return false
	case u.Opaque != "" || u.Host == "" || u.Hostname() == "":
		errs.add(path, "URL %q has no host", raw)
	case u.User != nil:
		errs.add(path, "URL %q must not contain user info", raw)
	case u.Path != "" && u.Path != "/":
		errs.add(path, "URL %q must not have a path: the client's request path is forwarded unchanged", raw)
	case u.RawQuery != "" || u.ForceQuery:
		errs.add(path, "URL %q must not have a query", raw)
	case u.Fragment != "":
		errs.add(path, "URL %q must not have a fragment", raw)
	case u.Port() != "" || strings.HasSuffix(u.Host, ":"):
		checkPort(errs, path, u.Port())
	}
	return u.Scheme == "https"
}

// checkHostPattern checks a route's Host: a host name or IP, optionally
// with a port; no scheme or path.
func checkHostPattern(errs *errorList, path, host string) {
	if strings.ContainsAny(host, "/ \t@?#") {
		errs.add(path, "invalid host %q: want a host name, optionally with :port", host)
		return
	}
	h, port, err := net.SplitHostPort(host)
	if err == nil {
		checkPort(errs, path, port)
	} else {
		h = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		bracketed := strings.HasPrefix(host, "[")
		if bracketed != strings.HasSuffix(host, "]") {
			errs.add(path, "invalid host %q: unbalanced brackets", host)
			return
		}
		if strings.Contains(h, ":") && !bracketed {
			errs.add(path, "invalid host %q: write IPv6 addresses in brackets, e.g. \"[::1]:8080\"", host)
			return
		}
	}
	if h == "" {
		errs.add(path, "invalid host %q: empty host name", host)
	}
}

func checkOneOf(errs *errorList, path, what, v string, allowed []string) {
	if !slices.Contains(allowed, v) {
		errs.add(path, "unknown %s %q (allowed: %s)", what, v, strings.Join(allowed, ", "))
	}
}

func checkPositive(errs *errorList, path string, d time.Duration) {
	switch {
	case d < 0:
		errs.add(path, "must not be negative, got %s", d)
	case d == 0:
		errs.add(path, "must be greater than 0")
	}
}

func checkRTOMin(errs *errorList, path string, d time.Duration) {
	checkPositive(errs, path, d)
	if d > MaxRTOMin {
		errs.add(path, "must be at most %s (the kernel's own minimum), got %s", MaxRTOMin, d)
	}
}

func checkNonNegative(errs *errorList, path string, d time.Duration) {
	if d < 0 {
		errs.add(path, "must not be negative, got %s", d)
	}
}

func checkPositiveSize(errs *errorList, path string, b ByteSize) {
	if b <= 0 {
		errs.add(path, "must be greater than 0, got %d", int64(b))
	}
}

// validate checks that the certificate and key come together, that an origin has them,
// and that the files can be read: a typo in a path should fail `config check`, not the
// first connection.
func (t *TLS) validate(errs *errorList, p string, server bool) {
	switch {
	case server && t.CertFile == "":
		errs.add(p+".cert_file", "required to serve TLS")
	case t.CertFile != "" && t.KeyFile == "":
		errs.add(p+".key_file", "required with cert_file")
	case t.KeyFile != "" && t.CertFile == "":
		errs.add(p+".cert_file", "required with key_file")
	}
	if server && t.ServerName != "" {
		errs.add(p+".server_name", "only applies where soapgw connects (edge peers, upstreams): it names the server it expects")
	}
	for _, f := range []struct{ key, path string }{{"cert_file", t.CertFile}, {"key_file", t.KeyFile}, {"ca_file", t.CAFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			errs.add(p+"."+f.key, "cannot read %q: %v", f.path, errors.Unwrap(err))
		}
	}
}

// checkOriginCredentials makes authentication the default: an origin serves no edge
// unless it can authenticate it, or the operator said insecure: true.
func checkOriginCredentials(errs *errorList, o *OriginConfig) {
	if o.Auth != nil {
		o.Auth.validate(errs, "origin.auth")
	}
	mtls := o.TLS != nil && o.TLS.CAFile != ""
	switch {
	case o.Insecure && (o.Auth != nil || o.TLS != nil):
		errs.add("origin.insecure", "cannot be combined with auth or tls: choose authenticated or insecure")
	case !o.Insecure && o.Auth == nil && !mtls:
		errs.add("origin", "no way to authenticate edges: add auth (a shared key: `soapgw keygen`), tls with ca_file (mutual TLS), or insecure: true (plaintext, anyone who reaches %s can call every upstream)", o.Listen)
	}
}

// checkPeerCredentials requires an edge peer to carry credentials the origin can check.
func checkPeerCredentials(errs *errorList, p string, peer Peer) {
	if peer.Auth != nil {
		peer.Auth.validate(errs, p+".auth")
	}
	clientCert := peer.TLS != nil && peer.TLS.CertFile != ""
	switch {
	case peer.Insecure && (peer.Auth != nil || peer.TLS != nil):
		errs.add(p+".insecure", "cannot be combined with auth or tls: choose authenticated or insecure")
	case !peer.Insecure && peer.Auth == nil && !clientCert:
		errs.add(p, "no credentials for the origin: add auth (the shared key the origin holds), tls with cert_file and key_file (mutual TLS), or insecure: true (plaintext; the origin must allow it too)")
	}
}

// validate checks that exactly one key source is given and that it holds usable keys: a
// bad key should fail `config check`, not every handshake.
func (a *Auth) validate(errs *errorList, p string) {
	switch {
	case a.KeyFile == "" && a.Key == "":
		errs.add(p, "needs key_file or key")
	case a.KeyFile != "" && a.Key != "":
		errs.add(p, "key_file and key are exclusive: give one")
	case a.KeyFile != "":
		data, err := os.ReadFile(a.KeyFile)
		if err != nil {
			errs.add(p+".key_file", "cannot read %q: %v", a.KeyFile, errors.Unwrap(err))
			return
		}
		if _, err := peerauth.ParseKeys(a.KeyFile, data); err != nil {
			errs.add(p+".key_file", "%v", err)
		}
	default:
		if _, err := peerauth.ParseKeys("key", []byte(a.Key)); err != nil {
			errs.add(p+".key", "%v", err)
		}
	}
}
