package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/httpwire"
	"github.com/soapgw/soapgw/internal/testutil"
)

func TestConnectionAuth(t *testing.T) {
	h := func(kv ...string) httpwire.Header {
		var out httpwire.Header
		for i := 0; i < len(kv); i += 2 {
			out = append(out, httpwire.Field{Name: kv[i], Value: kv[i+1]})
		}
		return out
	}
	for _, c := range []struct {
		name      string
		req, resp httpwire.Header
		want      bool
	}{
		{"no auth", h("Host", "h"), h("Content-Type", "text/xml"), false},
		{"basic", h("Authorization", "Basic YTpi"), nil, false},
		{"bearer", h("Authorization", "Bearer x.y.z"), nil, false},
		{"ntlm request", h("authorization", "NTLM TlRMTVNTUAABAAAA"), nil, true},
		{"negotiate request", h("Authorization", "Negotiate YIIGhgYGKwYBBQUCoIIGejCC"), nil, true},
		{"ntlm challenge", nil, h("WWW-Authenticate", "NTLM"), true},
		{"ntlm challenge with token", nil, h("WWW-Authenticate", "NTLM TlRMTVNTUAACAAAA"), true},
		{"list", nil, h("WWW-Authenticate", "Basic realm=\"x\", Negotiate"), true},
		{"lower case", nil, h("www-authenticate", "negotiate"), true},
		{"scheme name in a parameter", nil, h("WWW-Authenticate", "Basic realm=\"NTLM, x\""), false},
		{"basic challenge", nil, h("WWW-Authenticate", "Basic realm=\"soap\""), false},
		{"persistent auth", nil, h("Persistent-Auth", "true"), true},
	} {
		require.Equal(t, c.want, connectionAuth(c.req, c.resp), c.name)
	}
}

// call sends a SOAP request with an optional Authorization and returns the status and body.
func (c *client) call(auth string) (int, string) {
	c.t.Helper()
	extra := ""
	if auth != "" {
		extra = "Authorization: " + auth + "\r\n"
	}
	c.send(soapRequest(1, "/svc", extra, "<a/>"))
	resp, body := c.read("POST")
	return resp.StatusCode, string(body)
}

// Through the pair, each client connection completes its own NTLM handshake (three
// requests that must share one upstream connection) and keeps its identity on later calls
// without credentials, as it would talking to the server directly; a client without
// credentials never runs as another's user, although the origin pools upstream
// connections.
func TestConnectionAuthHandshakePerClient(t *testing.T) {
	env := newEnv(t, envConfig{Upstreams: []Upstream{{Name: "up", Address: testutil.NTLMServer(t), PoolSize: 4, IdleTimeout: time.Minute}}})
	handshake := func(c *client, user string) {
		t.Helper()
		st, _ := c.call("")
		require.Equal(t, 401, st)
		st, _ = c.call("NTLM T1")
		require.Equal(t, 401, st)
		st, body := c.call("NTLM T3-" + user)
		require.Equal(t, 200, st, "the handshake's last leg did not reach the connection that had its challenge")
		require.Equal(t, "<hello>"+user+"</hello>", body)
	}
	alice, bob, eve := env.dial(), env.dial(), env.dial()
	handshake(alice, "alice")
	for range 3 {
		st, body := eve.call("")
		require.Equal(t, 401, st, "a client without credentials ran as %q", body)
	}
	handshake(bob, "bob")
	for range 3 {
		for _, c := range []struct {
			cl   *client
			want string
		}{{alice, "<hello>alice</hello>"}, {bob, "<hello>bob</hello>"}} {
			st, body := c.cl.call("")
			require.Equal(t, 200, st)
			require.Equal(t, c.want, body)
		}
		st, body := eve.call("")
		require.Equal(t, 401, st, "a client without credentials ran as %q", body)
		st, body = env.dial().call("")
		require.Equal(t, 401, st, "a new client without credentials ran as %q", body)
	}
}

func TestAffinityKey(t *testing.T) {
	for id, want := range map[string]string{
		"8a3f00c1-17":       "",
		"8a3f00c1-17~c4":    "8a3f00c1-c4",
		"8a3f00c1-1234~c4":  "8a3f00c1-c4",
		"ow.8a3f00c1-17~c4": "",
		"nodash~c4":         "",
		"~c4-":              "",
		"8a3f00c1-17~":      "",
		"8a3f00c1-17~c4~c5": "8a3f00c1-c5",
	} {
		require.Equal(t, want, affinityKey(id), id)
	}
}

// Pins are bounded in number and idle time, and never outlive their pool.
func TestPinnedConnsAreBounded(t *testing.T) {
	conn := func() (*upstreamConn, net.Conn) {
		a, b := net.Pipe()
		t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
		return &upstreamConn{conn: a, br: bufio.NewReader(a)}, b
	}
	closed := func(peer net.Conn) bool {
		_ = peer.SetReadDeadline(time.Now().Add(time.Second))
		_, err := peer.Read(make([]byte, 1))
		return errors.Is(err, io.EOF)
	}

	m := NewMetrics(nil)
	p := &upstreamPool{up: Upstream{Name: "up", IdleTimeout: time.Hour}, m: m}
	peers := make([]net.Conn, maxPinnedConns+1)
	for i := range peers {
		var uc *upstreamConn
		uc, peers[i] = conn()
		p.pin("k"+strconv.Itoa(i), uc)
	}
	// Past the bound the pin idle longest (k0) makes room: the newest is the one a
	// handshake in progress needs.
	require.Len(t, p.pins, maxPinnedConns)
	require.Equal(t, float64(maxPinnedConns), promtest.ToFloat64(m.pinnedConns.WithLabelValues("up")))
	require.Equal(t, 1.0, promtest.ToFloat64(m.pinsEvicted.WithLabelValues("up")))
	require.True(t, closed(peers[0]), "the pin idle longest was kept past the bound")
	require.NotNil(t, p.pins["k"+strconv.Itoa(maxPinnedConns)], "the newest pin was not kept")

	uc, peer := conn()
	p.pin("k1", uc) // the key's exchange took a connection of its own meanwhile: the older one goes
	require.True(t, closed(peers[1]))
	require.Same(t, uc, p.pins["k1"])
	require.Equal(t, 1.0, promtest.ToFloat64(m.pinsEvicted.WithLabelValues("up")), "a key's own replacement is no eviction")
	_ = peer

	p.closeIdle()
	require.Empty(t, p.pins)
	require.Zero(t, promtest.ToFloat64(m.pinnedConns.WithLabelValues("up")))
	require.True(t, closed(peers[2]))

	idle := &upstreamPool{up: Upstream{IdleTimeout: time.Nanosecond}}
	old, oldPeer := conn()
	idle.pin("old", old)
	young, _ := conn()
	idle.pin("young", young) // the old pin's idle time has passed by now
	require.True(t, closed(oldPeer), "a pin idle past the upstream's idle timeout was kept")
	require.Nil(t, idle.takePinned("old"))
}

// A client that closes its connection after the call gets no affinity key: its pinned
// connection could never be used again.
func TestAffinityOnlyForConnectionsThatStay(t *testing.T) {
	auth := httpwire.Header{{Name: "Authorization", Value: "Negotiate YIIG"}}
	for _, c := range []struct {
		name   string
		req    *httpwire.Request
		tagged bool
	}{
		{"keep-alive with credentials", &httpwire.Request{Header: auth}, true},
		{"closing with credentials", &httpwire.Request{Header: auth, Close: true}, false},
		{"keep-alive without", &httpwire.Request{}, false},
	} {
		cc := &clientConn{}
		id := cc.affine("8a3f00c1-1", c.req)
		require.Equal(t, c.tagged, affinityKey(id) != "", c.name)
	}
	cc := &clientConn{affinity: "c9"} // a key from an earlier call stays for the connection's last one
	require.Equal(t, "8a3f00c1-2~c9", cc.affine("8a3f00c1-2", &httpwire.Request{Close: true}))
}
