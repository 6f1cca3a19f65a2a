package e2e

import (
	"bufio"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/testutil"
)

// TestNTLMThroughThePair: each client connection completes its own NTLM handshake through
// the gateways (built binaries, both tunnels, the origin's default pool of upstream
// connections) and keeps its identity on later calls; a client without credentials never
// runs as another's user.
func TestNTLMThroughThePair(t *testing.T) {
	for _, transport := range []string{"tcp", "udp"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			a := startPairOver(t, transport, "http://"+testutil.NTLMServer(t), "", "")

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
				var extra []string
				if auth != "" {
					extra = append(extra, "Authorization: "+auth)
				}
				_, err := cn.c.Write(frSoapRequest("svc", "/svc", false, smallBody, extra...))
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

			// Clients that authenticate and leave, more than the origin pins (256 per
			// upstream) within its idle timeout: every handshake completes (a full table
			// gives up the pin idle longest, not the new one). alice, idle through them,
			// lost her pin: the server asks her again, she never runs as another.
			for i := range 300 {
				cn := dial()
				handshake(cn, "u"+strconv.Itoa(i))
				_ = cn.c.Close()
			}
			st, body := call(alice, "")
			require.Equal(t, 401, st, "an evicted client ran as %q", body)
			handshake(alice, "alice")
		})
	}
}
