package e2e

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/testutil"
)

// Chunked client → HTTP/1.0 server (issue #17): a client that sends its body chunked (CXF
// and Axis2 do by default) reaches a server that reads bodies by Content-Length only,
// through a pair with the default configuration, from the first call.

var h10Ready = regexp.MustCompile(`(?m)^READY ([0-9]+)$`)

// h10StartServer starts soapstack/http10server.py (Python's http.server speaking
// HTTP/1.0: 411 for a chunked body) and returns it with its address.
func h10StartServer(t *testing.T) (*proc, string) {
	t.Helper()
	_, err := exec.LookPath(zpPython)
	testutil.Needs(t, "python3", err, "make test-deps (Debian's python3)")
	p := startProc(t, zpPython, filepath.Join("soapstack", "http10server.py"), "--port", "0")
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if m := h10Ready.FindStringSubmatch(p.out.String()); m != nil {
			return p, "127.0.0.1:" + m[1]
		}
		select {
		case <-p.done:
			t.Fatalf("http10server.py exited before READY: %v\n%s", p.err, p.out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("http10server.py not READY within 15s:\n%s", p.out.String())
	return nil, ""
}

// h10ChunkedRequest is a chunked SOAP request as a CXF client sends it, with the body
// cut into chunks of chunk bytes.
func h10ChunkedRequest(host, path, body string, chunk int) (head, raw string) {
	head = "POST " + path + " HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: text/xml; charset=UTF-8\r\n" +
		"Accept: */*\r\nSOAPAction: \"urn:legacy:Submit\"\r\nUser-Agent: Apache-CXF/3.5.5\r\n" +
		"Transfer-Encoding: chunked\r\nX-Request-Id: 7f3a\r\n\r\n"
	var b strings.Builder
	b.WriteString(head)
	for len(body) > 0 {
		n := min(chunk, len(body))
		fmt.Fprintf(&b, "%x\r\n%s\r\n", n, body[:n])
		body = body[n:]
	}
	b.WriteString("0\r\n\r\n")
	return head, b.String()
}

// h10Seen is what http10server.py reports of a request it read.
type h10Seen struct {
	Version string      `json:"version"`
	Headers [][2]string `json:"headers"`
	Body    string      `json:"body"` // base64
}

func TestChunkedToHTTP10Server(t *testing.T) {
	srv, srvAddr := h10StartServer(t)
	a, _, _ := startPair(t, "http://"+srvAddr) // the defaults: http_version "1.1", no chunked key
	body := `<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"><soapenv:Body>` +
		`<Submit xmlns="urn:legacy"><note>Grüße, 東京</note><data>` + strings.Repeat("0123456789abcdef", 12000) +
		`</data></Submit></soapenv:Body></soapenv:Envelope>`

	t.Run("direct: the server refuses a chunked body", func(t *testing.T) {
		_, raw := h10ChunkedRequest(srvAddr, "/legacy", body, 4096)
		r, err := frExchange(srvAddr, []byte(raw), 10*time.Second)
		require.NoError(t, err)
		require.Equal(t, 411, r.Status, r.String())
	})

	t.Run("through the pair: Content-Length, the exact body and fields", func(t *testing.T) {
		for _, chunk := range []int{4096, 1, len(body)} {
			b := body
			if chunk == 1 {
				b = body[:300] // one byte per chunk: keep it short
			}
			head, raw := h10ChunkedRequest(a.Edge, "/legacy", b, chunk)
			r, err := frExchange(a.Edge, []byte(raw), 20*time.Second)
			require.NoError(t, err)
			require.Equal(t, 200, r.Status, r.String())
			var seen h10Seen
			require.NoError(t, json.Unmarshal(r.Body, &seen), r.String())
			require.Equal(t, "HTTP/1.1", seen.Version)
			got, err := base64.StdEncoding.DecodeString(seen.Body)
			require.NoError(t, err)
			require.Equal(t, b, string(got), "body at the server (chunks of %d)", chunk)

			// The client's fields in order and casing, Transfer-Encoding replaced by a
			// Content-Length at the end.
			var want [][2]string
			for _, line := range strings.Split(strings.TrimSuffix(head, "\r\n\r\n"), "\r\n")[1:] {
				k, v, _ := strings.Cut(line, ": ")
				if k != "Transfer-Encoding" {
					want = append(want, [2]string{k, v})
				}
			}
			want = append(want, [2]string{"Content-Length", strconv.Itoa(len(b))})
			require.Equal(t, want, seen.Headers)
		}
	})

	t.Run("over max_request_bytes: refused, nothing reaches the server", func(t *testing.T) {
		before := strings.Count(srv.out.String(), "CONN")
		// 33 MiB, over the default 32 MiB: the size of the body that reached the server
		// before the 413 in the issue.
		part := strings.Repeat("x", 1<<20)
		c, err := net.DialTimeout("tcp", a.Edge, 5*time.Second)
		require.NoError(t, err)
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(60 * time.Second))
		head, _ := h10ChunkedRequest(a.Edge, "/legacy", "", 1)
		go func() { // the edge answers (and closes) before the client has sent it all
			w := bufio.NewWriterSize(c, 1<<20)
			_, _ = io.WriteString(w, head)
			for range 33 {
				if _, err := fmt.Fprintf(w, "%x\r\n%s\r\n", len(part), part); err != nil {
					return
				}
			}
			_, _ = io.WriteString(w, "0\r\n\r\n")
			_ = w.Flush()
		}()
		if r, err := frReadResponse(bufio.NewReader(c)); err == nil {
			require.Equal(t, "request_too_large", r.Get("X-Soapgw-Error"), r.String())
		} // else: the edge's close reset the connection before the client read the Fault
		require.Eventually(t, func() bool {
			return metricSum(t, a.EdgeAdmin, "soapgw_gateway_errors_total", "role=edge", "cause=request_too_large") == 1
		}, 10*time.Second, 20*time.Millisecond)
		require.Equal(t, before, strings.Count(srv.out.String(), "CONN"), "connections at the server:\n%s", srv.out.String())

		// The pair is fine afterwards.
		_, raw := h10ChunkedRequest(a.Edge, "/legacy", "<ok/>", 2)
		r, err := frExchange(a.Edge, []byte(raw), 20*time.Second)
		require.NoError(t, err)
		require.Equal(t, 200, r.Status, r.String())
	})
}
