package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// startNTLMServer is a server that authenticates connections the way IIS runs NTLM:
// "Authorization: NTLM T1" gets a challenge, "NTLM T3-<user>" on the same connection
// after it authenticates the connection, and later requests on it run as that user with
// or without credentials. Anything else gets a 401 NTLM challenge.
func startNTLMServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(time.Minute))
				br := bufio.NewReader(c)
				user, challenged := "", false
				for {
					req, err := readRawRequest(br)
					if err != nil {
						return
					}
					auth := req.Header("Authorization")
					answer := "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: NTLM\r\nContent-Length: 0\r\n\r\n"
					switch {
					case auth == "NTLM T1":
						user, challenged = "", true
						answer = "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: NTLM CHALLENGE\r\nContent-Length: 0\r\n\r\n"
					case strings.HasPrefix(auth, "NTLM T3-") && challenged:
						user, challenged = strings.TrimPrefix(auth, "NTLM T3-"), false
					case auth == "" && user != "":
					default:
						user, challenged = "", false
					}
					if user != "" {
						body := "<hello>" + user + "</hello>"
						answer = "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
					}
					if _, err := io.WriteString(c, answer); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// TestNTLMThroughThePair: each client connection completes its own NTLM handshake through
// the gateways (built binaries, both tunnels, the origin's default pool of upstream
// connections) and keeps its identity on later calls; a client without credentials never
// runs as another's user.
func TestNTLMThroughThePair(t *testing.T) {
	for _, transport := range []string{"tcp", "udp"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			a := newPairAddrs(t)
			startGateway(t, a.OriginAdmin, originYAML(a, startNTLMServer(t), ""))
			edgeCfg := edgeYAML(a, "")
			if transport == "udp" {
				edgeCfg = udpEdgeYAML(a, a.Tunnel, "")
			}
			startGateway(t, a.EdgeAdmin, edgeCfg)

			type conn struct {
				c  net.Conn
				br *bufio.Reader
			}
			dial := func() *conn {
				c, err := net.Dial("tcp", a.Edge)
				require.NoError(t, err)
				t.Cleanup(func() { _ = c.Close() })
				require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
				return &conn{c, bufio.NewReader(c)}
			}
			call := func(cn *conn, auth string) (int, string) {
				t.Helper()
				extra := ""
				if auth != "" {
					extra = "Authorization: " + auth + "\r\n"
				}
				body := `<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><who xmlns="urn:t"/></soap:Body></soap:Envelope>`
				_, err := fmt.Fprintf(cn.c, "POST /svc HTTP/1.1\r\nHost: svc\r\nContent-Type: text/xml; charset=utf-8\r\nSOAPAction: \"urn:who\"\r\n%sContent-Length: %d\r\n\r\n%s", extra, len(body), body)
				require.NoError(t, err)
				resp, err := frReadResponse(cn.br)
				require.NoError(t, err)
				return resp.Status, string(resp.Body)
			}
			handshake := func(cn *conn, user string) {
				t.Helper()
				st, _ := call(cn, "")
				require.Equal(t, 401, st)
				st, _ = call(cn, "NTLM T1")
				require.Equal(t, 401, st)
				st, body := call(cn, "NTLM T3-"+user)
				require.Equal(t, 200, st, "the handshake's last leg missed the connection that had its challenge")
				require.Equal(t, "<hello>"+user+"</hello>", body)
			}
			alice, bob, eve := dial(), dial(), dial()
			handshake(alice, "alice")
			handshake(bob, "bob")
			for range 5 {
				for _, c := range []struct {
					cn   *conn
					want string
				}{{alice, "alice"}, {bob, "bob"}} {
					st, body := call(c.cn, "")
					require.Equal(t, 200, st)
					require.Equal(t, "<hello>"+c.want+"</hello>", body)
				}
				st, body := call(eve, "")
				require.Equal(t, 401, st, "a client without credentials ran as %q", body)
				st, body = call(dial(), "")
				require.Equal(t, 401, st, "a new client without credentials ran as %q", body)
			}
		})
	}
}
