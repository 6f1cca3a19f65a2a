package proxy

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/httpwire"
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

// An upstream that authenticates connections the way IIS runs NTLM: a request with
// "Authorization: NTLM <user>" authenticates its connection, and every later request on
// that connection runs as that user, credentials or not; other requests get a 401
// challenge. Through soapgw one client authenticates; another client's request without
// credentials must get the challenge, never run as the first client's user on the
// connection the first one authenticated.
func TestConnectionAuthIsNotShared(t *testing.T) {
	addr := answeringUpstream(t, func(conn net.Conn, br *bufio.Reader) {
		user := ""
		for {
			head, err := readUntil(br, "\r\n\r\n")
			if err != nil {
				return
			}
			n := 0
			for _, line := range strings.Split(head, "\r\n") {
				name, v, _ := strings.Cut(line, ":")
				v = strings.TrimSpace(v)
				switch strings.ToLower(name) {
				case "content-length":
					n, _ = strconv.Atoi(v)
				case "authorization":
					if u, ok := strings.CutPrefix(v, "NTLM "); ok {
						user = u
					}
				}
			}
			if _, err := io.CopyN(io.Discard, br, int64(n)); err != nil {
				return
			}
			if user == "" {
				_, _ = io.WriteString(conn, "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: NTLM\r\nContent-Length: 0\r\n\r\n")
				continue
			}
			body := "hello " + user
			_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
		}
	})
	env := newEnv(t, envConfig{Upstreams: []Upstream{{Name: "up", Address: addr, PoolSize: 4, IdleTimeout: time.Minute}}})
	alice := env.dial()
	alice.send(soapRequest(1, "/svc", "Authorization: NTLM alice\r\n", "<a/>"))
	resp, body := alice.read("POST")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "hello alice", string(body))

	for range 3 {
		bob := env.dial()
		bob.send(soapRequest(1, "/svc", "", "<b/>"))
		resp, body = bob.read("POST")
		require.Equal(t, 401, resp.StatusCode, "a client without credentials ran as %q", body)
	}
}
