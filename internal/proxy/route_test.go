package proxy

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRouteMatches(t *testing.T) {
	cases := []struct {
		name     string
		r        Route
		listener string
		host     string
		target   string
		want     bool
	}{
		{"empty route matches all", Route{}, "main", "svc.example", "/x", true},
		{"empty route, empty host", Route{}, "", "", "/", true},

		{"listener equal", Route{Listener: "main"}, "main", "h", "/", true},
		{"listener differs", Route{Listener: "main"}, "other", "h", "/", false},
		{"listener is case-sensitive", Route{Listener: "main"}, "Main", "h", "/", false},

		{"prefix /", Route{PathPrefix: "/"}, "", "h", "/anything", true},
		{"prefix / with asterisk target", Route{PathPrefix: "/"}, "", "h", "*", true},
		{"prefix match", Route{PathPrefix: "/svc"}, "", "h", "/svc/Calc", true},
		{"prefix exact", Route{PathPrefix: "/svc"}, "", "h", "/svc", true},
		{"prefix is a string prefix", Route{PathPrefix: "/svc"}, "", "h", "/svcX", true},
		{"prefix with query", Route{PathPrefix: "/svc"}, "", "h", "/svc?wsdl", true},
		{"prefix mismatch", Route{PathPrefix: "/svc"}, "", "h", "/other", false},
		{"prefix is case-sensitive", Route{PathPrefix: "/svc"}, "", "h", "/SVC/Calc", false},
		{"prefix longer than target", Route{PathPrefix: "/svc/Calc"}, "", "h", "/svc", false},

		{"host equal", Route{Host: "svc.example"}, "", "svc.example", "/", true},
		{"host case-insensitive", Route{Host: "SVC.Example"}, "", "svc.EXAMPLE", "/", true},
		{"host differs", Route{Host: "svc.example"}, "", "other.example", "/", false},
		{"host suffix is not a match", Route{Host: "example"}, "", "svc.example", "/", false},
		{"host missing", Route{Host: "svc.example"}, "", "", "/", false},
		{"pattern without port ignores request port", Route{Host: "svc.example"}, "", "svc.example:8080", "/", true},
		{"pattern without port, empty request port", Route{Host: "svc.example"}, "", "svc.example:", "/", true},
		{"pattern with port equal", Route{Host: "svc.example:8080"}, "", "svc.example:8080", "/", true},
		{"pattern with port, other port", Route{Host: "svc.example:8080"}, "", "svc.example:9090", "/", false},
		{"pattern with port, request without", Route{Host: "svc.example:8080"}, "", "svc.example", "/", false},
		{"pattern with port, case-insensitive", Route{Host: "SVC.example:8080"}, "", "svc.EXAMPLE:8080", "/", true},
		{"ipv4 with port", Route{Host: "10.0.0.1"}, "", "10.0.0.1:80", "/", true},
		{"ipv6 with port, pattern with port", Route{Host: "[::1]:8080"}, "", "[::1]:8080", "/", true},
		{"ipv6 with port, pattern other port", Route{Host: "[::1]:8080"}, "", "[::1]:9090", "/", false},
		{"ipv6 without port, pattern with port", Route{Host: "[::1]:8080"}, "", "[::1]", "/", false},
		{"ipv6 equal without ports", Route{Host: "[::1]"}, "", "[::1]", "/", true},
		{"ipv6 case-insensitive", Route{Host: "[FE80::1]"}, "", "[fe80::1]", "/", true},
		{"ipv6 differs", Route{Host: "[::2]"}, "", "[::1]", "/", false},

		{"all fields match", Route{Listener: "main", PathPrefix: "/svc", Host: "svc.example"}, "main", "svc.example:80", "/svc/a", true},
		{"all but listener", Route{Listener: "main", PathPrefix: "/svc", Host: "svc.example"}, "x", "svc.example", "/svc/a", false},
		{"all but prefix", Route{Listener: "main", PathPrefix: "/svc", Host: "svc.example"}, "main", "svc.example", "/a", false},
		{"all but host", Route{Listener: "main", PathPrefix: "/svc", Host: "svc.example"}, "main", "x.example", "/svc/a", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, c.r.matches(c.listener, c.host, c.target),
				"route %+v, listener %q, host %q, target %q", c.r, c.listener, c.host, c.target)
		})
	}
}

// Regression: an IPv6 literal pattern such as "[::1]" has no port, so the request's port
// must be ignored when matching it.
func TestRouteIPv6HostPatternWithoutPort(t *testing.T) {
	r := Route{Host: "[::1]"}
	require.True(t, r.matches("", "[::1]:8080", "/"), "IPv6 pattern without port must ignore the request's port")
	r = Route{Host: "[2001:db8::1]"}
	require.True(t, r.matches("", "[2001:DB8::1]:443", "/"))
}

func TestEdgeConfigValidate(t *testing.T) {
	peers := map[string]Opener{"p": OpenerFunc(func(context.Context) (Stream, error) { return nil, nil })}
	cases := []struct {
		name string
		cfg  EdgeConfig
		want string // substring of the error; "" = valid
	}{
		{"valid", EdgeConfig{Routes: []Route{{Peer: "p", Upstream: "u"}}, Peers: peers}, ""},
		{"valid several", EdgeConfig{Routes: []Route{{Peer: "p", Upstream: "u"}, {Peer: "p", Upstream: "v", Host: "h"}}, Peers: peers}, ""},
		{"no routes", EdgeConfig{Peers: peers}, "at least one route"},
		{"empty routes", EdgeConfig{Routes: []Route{}, Peers: peers}, "at least one route"},
		{"unknown peer", EdgeConfig{Routes: []Route{{Peer: "q", Upstream: "u"}}, Peers: peers}, `route 0 names unknown peer "q"`},
		{"empty peer name", EdgeConfig{Routes: []Route{{Upstream: "u"}}, Peers: peers}, `unknown peer ""`},
		{"nil peers", EdgeConfig{Routes: []Route{{Peer: "p", Upstream: "u"}}}, "unknown peer"},
		{"second route bad", EdgeConfig{Routes: []Route{{Peer: "p", Upstream: "u"}, {Peer: "x", Upstream: "u"}}, Peers: peers}, "route 1 names unknown peer"},
		{"no upstream", EdgeConfig{Routes: []Route{{Peer: "p"}}, Peers: peers}, "route 0 has no upstream"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.validate()
			if c.want == "" {
				require.NoError(t, err)
				e, err := NewEdge(c.cfg, nil, nil)
				require.NoError(t, err)
				require.NotNil(t, e)
				return
			}
			require.ErrorContains(t, err, c.want)
			_, err = NewEdge(c.cfg, nil, nil)
			require.ErrorContains(t, err, c.want, "NewEdge validates")
		})
	}
}

// Routes are tried in order and the first match wins, through a running edge.
func TestRouteFirstMatchWins(t *testing.T) {
	named := func(name string) respondFunc {
		return func(int, upstreamReq) ([]byte, bool) {
			return []byte("HTTP/1.1 200 OK\r\nX-Upstream: " + name + "\r\nContent-Length: 0\r\n\r\n"), false
		}
	}
	ua := newUpstream(t, named("a"))
	ub := newUpstream(t, named("b"))
	uc := newUpstream(t, named("c"))
	ud := newUpstream(t, named("d"))
	env := newEnv(t, envConfig{
		Listeners: []string{"main", "admin"},
		Upstreams: []Upstream{
			{Name: "a", Address: ua.addr()}, {Name: "b", Address: ub.addr()},
			{Name: "c", Address: uc.addr()}, {Name: "d", Address: ud.addr()},
		},
		Routes: []Route{
			{Listener: "admin", Peer: "p", Upstream: "d"},
			{PathPrefix: "/svc/special", Peer: "p", Upstream: "c"},
			{Host: "b.example", Peer: "p", Upstream: "b"},
			{PathPrefix: "/svc", Peer: "p", Upstream: "a"},
			{PathPrefix: "/svc", Host: "b.example", Peer: "p", Upstream: "c"}, // shadowed by the route above it
		},
	})
	cases := []struct {
		listener, host, target, want string
	}{
		{"main", "a.example", "/svc/Calc", "a"},
		{"main", "b.example:8080", "/svc/Calc", "b"},  // Host route precedes the /svc route
		{"main", "B.EXAMPLE", "/other", "b"},          // case-insensitive host
		{"main", "b.example", "/svc/special/x", "c"},  // prefix route listed before the host route
		{"admin", "b.example", "/svc/special/x", "d"}, // listener route listed first
		{"admin", "a.example", "/", "d"},
	}
	for _, c := range cases {
		cl := env.dial(c.listener)
		cl.send("POST " + c.target + " HTTP/1.1\r\nHost: " + c.host + "\r\nContent-Length: 2\r\n\r\nhi")
		resp, _ := cl.read("POST")
		require.Equal(t, 200, resp.StatusCode, "%+v", c)
		require.Equal(t, c.want, resp.Header.Get("X-Upstream"), "%+v", c)
	}

	// No route: 404 Fault, soap:Client, connection closed (the body was not read).
	cl := env.dial()
	cl.send("POST /nowhere HTTP/1.1\r\nHost: a.example\r\nContent-Length: 2\r\n\r\nhi")
	f := cl.readFault()
	requireGatewayStatus(t, f, 404)
	require.Equal(t, causeNoRoute, f.cause)
	require.Equal(t, "soap:Client", f.code)
	require.True(t, strings.Contains(f.text, "/nowhere"), f.text)
	require.True(t, f.resp.Close)
	cl.requireClosed()
	require.Len(t, ua.requests(), 1, "only the first case reached upstream a")
}
