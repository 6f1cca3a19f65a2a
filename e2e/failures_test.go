package e2e

// Failure tests: every way an exchange can fail must end in a well-formed gateway SOAP
// Fault (status, X-Soapgw-Error cause, fault in the client's SOAP version, faultstring
// naming the cause), except a server's own fault, which must pass through untouched; and
// the gateways must keep working afterwards.
//
// Helpers shared by failures_test.go, restart_test.go and lifecycle_test.go carry the
// "fr" prefix so they cannot clash with other files of the package.

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ---------------------------------------------------------------------------------------
// Shared helpers.

// frResp is one HTTP response as a client received it.
type frResp struct {
	Raw    []byte // every byte of the response, head and body as framed on the wire
	Minor  int
	Status int
	Reason string
	Header [][2]string // in order, names as received
	Body   []byte      // de-chunked
}

func (r *frResp) Get(name string) string {
	for _, h := range r.Header {
		if strings.EqualFold(h[0], name) {
			return h[1]
		}
	}
	return ""
}

func (r *frResp) Has(name string) bool {
	for _, h := range r.Header {
		if strings.EqualFold(h[0], name) {
			return true
		}
	}
	return false
}

// closes reports whether the server will close the connection after this response.
func (r *frResp) closes() bool {
	c := strings.ToLower(r.Get("Connection"))
	if r.Minor == 0 {
		return !strings.Contains(c, "keep-alive")
	}
	return strings.Contains(c, "close")
}

func (r *frResp) String() string {
	if r == nil {
		return "<nil response>"
	}
	s := string(r.Raw)
	if len(s) > 600 {
		s = s[:600] + "…"
	}
	return fmt.Sprintf("%q", s)
}

// frReadResponse reads one response (to a POST) from br. A body without Content-Length
// or chunked framing is read to EOF. An incomplete response is an error: a client must
// never take a truncated message for a whole one.
func frReadResponse(br *bufio.Reader) (*frResp, error) {
	var raw bytes.Buffer
	line, err := br.ReadString('\n')
	raw.WriteString(line)
	if err != nil {
		if raw.Len() == 0 {
			return nil, err
		}
		return nil, fmt.Errorf("incomplete status line %q: %w", raw.String(), err)
	}
	r := &frResp{}
	sl := strings.TrimRight(line, "\r\n")
	if len(sl) < 12 || !strings.HasPrefix(sl, "HTTP/1.") || sl[8] != ' ' {
		return nil, fmt.Errorf("bad status line %q", sl)
	}
	r.Minor = int(sl[7] - '0')
	if r.Status, err = strconv.Atoi(sl[9:12]); err != nil {
		return nil, fmt.Errorf("bad status line %q", sl)
	}
	if len(sl) > 13 {
		r.Reason = sl[13:]
	}
	for {
		line, err := br.ReadString('\n')
		raw.WriteString(line)
		if err != nil {
			return nil, fmt.Errorf("incomplete head %q: %w", raw.String(), err)
		}
		if line == "\r\n" {
			break
		}
		k, v, ok := strings.Cut(strings.TrimRight(line, "\r\n"), ":")
		if !ok {
			return nil, fmt.Errorf("bad header line %q", line)
		}
		r.Header = append(r.Header, [2]string{k, strings.TrimSpace(v)})
	}
	switch {
	case r.Status < 200 || r.Status == 204 || r.Status == 304:
		// no body
	case strings.EqualFold(r.Get("Transfer-Encoding"), "chunked"):
		var body bytes.Buffer
		for {
			line, err := br.ReadString('\n')
			raw.WriteString(line)
			if err != nil {
				return nil, fmt.Errorf("incomplete chunked body after %d bytes: %w", body.Len(), err)
			}
			sz := strings.TrimRight(line, "\r\n")
			if i := strings.IndexByte(sz, ';'); i >= 0 {
				sz = sz[:i]
			}
			n, err := strconv.ParseInt(strings.TrimSpace(sz), 16, 64)
			if err != nil {
				return nil, fmt.Errorf("bad chunk size %q", sz)
			}
			if n == 0 {
				for {
					l, err := br.ReadString('\n')
					raw.WriteString(l)
					if err != nil {
						return nil, fmt.Errorf("incomplete trailer: %w", err)
					}
					if l == "\r\n" {
						break
					}
				}
				break
			}
			chunk := make([]byte, n+2)
			k, err := io.ReadFull(br, chunk)
			raw.Write(chunk[:k])
			if err != nil {
				return nil, fmt.Errorf("incomplete chunk: %w", err)
			}
			body.Write(chunk[:n])
		}
		r.Body = body.Bytes()
	case r.Get("Content-Length") != "":
		n, err := strconv.Atoi(r.Get("Content-Length"))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad Content-Length %q", r.Get("Content-Length"))
		}
		r.Body = make([]byte, n)
		k, err := io.ReadFull(br, r.Body)
		raw.Write(r.Body[:k])
		if err != nil {
			return nil, fmt.Errorf("truncated body: %d of %d bytes: %w", k, n, err)
		}
	default:
		b, err := io.ReadAll(br)
		raw.Write(b)
		r.Body = b
		if err != nil {
			return nil, fmt.Errorf("reading close-delimited body: %w", err)
		}
	}
	r.Raw = raw.Bytes()
	return r, nil
}

// frSoapRequest builds a SOAP 1.1 (text/xml + SOAPAction) or 1.2 (application/soap+xml)
// HTTP/1.1 request. extra are whole header lines without CRLF.
func frSoapRequest(host, path string, v12 bool, body string, extra ...string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\n", path, host)
	if v12 {
		b.WriteString("Content-Type: application/soap+xml; charset=utf-8; action=\"urn:e2e\"\r\n")
	} else {
		b.WriteString("Content-Type: text/xml; charset=utf-8\r\nSOAPAction: \"urn:e2e\"\r\n")
	}
	for _, e := range extra {
		b.WriteString(e + "\r\n")
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	return []byte(b.String())
}

// frExchange sends req on a new connection and reads one response; the connection is
// closed afterwards. It does not fail the test, so it can run in goroutines.
func frExchange(addr string, req []byte, timeout time.Duration) (*frResp, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write(req); err != nil {
		return nil, err
	}
	return frReadResponse(bufio.NewReader(c))
}

// frCall sends a SOAP request with Connection: close and returns the response.
func frCall(t testing.TB, addr, path string, v12 bool, body string, timeout time.Duration) *frResp {
	t.Helper()
	r, err := frExchange(addr, frSoapRequest(addr, path, v12, body, "Connection: close"), timeout)
	require.NoError(t, err, "call %s%s", addr, path)
	return r
}

// frEcho is what the world server answers to /echo/ requests.
func frEcho(body []byte) []byte { return []byte("<echo>" + string(body) + "</echo>") }

// frNormalCall checks that a plain call through addr to the echo upstream succeeds.
func frNormalCall(t testing.TB, addr, path string) {
	t.Helper()
	body := "<ok>" + strconv.FormatInt(time.Now().UnixNano(), 10) + "</ok>"
	r := frCall(t, addr, path, false, body, 10*time.Second)
	require.Equal(t, 200, r.Status, "normal call after the failure: %s", r)
	require.Equal(t, string(frEcho([]byte(body))), string(r.Body))
	require.False(t, r.Has("X-Soapgw-Error"))
}

// frFault is a parsed gateway SOAP Fault.
type frFault struct {
	Code, Reason, Cause, Exchange string
}

type frEnv11 struct {
	XMLName xml.Name `xml:"http://schemas.xmlsoap.org/soap/envelope/ Envelope"`
	Fault   struct {
		Code   string `xml:"faultcode"`
		String string `xml:"faultstring"`
		Err    struct {
			Cause    string `xml:"cause,attr"`
			Exchange string `xml:"exchange,attr"`
		} `xml:"detail>error"`
	} `xml:"http://schemas.xmlsoap.org/soap/envelope/ Body>Fault"`
}

type frEnv12 struct {
	XMLName xml.Name `xml:"http://www.w3.org/2003/05/soap-envelope Envelope"`
	Fault   struct {
		Code   string `xml:"http://www.w3.org/2003/05/soap-envelope Code>Value"`
		Reason string `xml:"http://www.w3.org/2003/05/soap-envelope Reason>Text"`
		Detail struct {
			Err struct {
				Cause    string `xml:"cause,attr"`
				Exchange string `xml:"exchange,attr"`
			} `xml:"urn:soapgw:error error"`
		} `xml:"http://www.w3.org/2003/05/soap-envelope Detail"`
	} `xml:"http://www.w3.org/2003/05/soap-envelope Body>Fault"`
}

// frParseFault parses a gateway fault body of either SOAP version.
func frParseFault(body []byte, v12 bool) (frFault, error) {
	if v12 {
		var e frEnv12
		if err := xml.Unmarshal(body, &e); err != nil {
			return frFault{}, err
		}
		return frFault{Code: e.Fault.Code, Reason: e.Fault.Reason, Cause: e.Fault.Detail.Err.Cause, Exchange: e.Fault.Detail.Err.Exchange}, nil
	}
	var e frEnv11
	if err := xml.Unmarshal(body, &e); err != nil {
		return frFault{}, err
	}
	return frFault{Code: e.Fault.Code, Reason: e.Fault.String, Cause: e.Fault.Err.Cause, Exchange: e.Fault.Err.Exchange}, nil
}

// frCheckFault verifies a gateway-made error as an edge with the default
// limits.fault_status (soap) sends it: the SOAP binding's status line (500; 400 for a SOAP
// 1.2 env:Sender Fault), X-Soapgw-Status carrying status (the HTTP-semantic status),
// X-Soapgw-Error, Content-Type and fault code of the client's SOAP version, the cause in
// the detail and a faultstring / Reason containing every string of reason. It returns the
// error instead of failing, so it can run in goroutines.
func frCheckFault(r *frResp, status int, cause string, v12 bool, reason ...string) error {
	return frCheckFaultMode(r, "soap", status, cause, v12, reason...)
}

// frFaultLine is the status line of a gateway Fault of HTTP-semantic status status, in
// limits.fault_status mode ("soap" or "http").
func frFaultLine(mode string, status int, v12 bool) int {
	switch {
	case mode == "http":
		return status
	case v12 && status >= 400 && status < 500:
		return 400
	}
	return 500
}

// frCheckFaultMode is frCheckFault for an edge in limits.fault_status mode.
func frCheckFaultMode(r *frResp, mode string, status int, cause string, v12 bool, reason ...string) error {
	if r == nil {
		return errors.New("no response")
	}
	if got := r.Get("X-Soapgw-Status"); got != strconv.Itoa(status) {
		return fmt.Errorf("X-Soapgw-Status %q, want %d: %s", got, status, r)
	}
	if want := frFaultLine(mode, status, v12); r.Status != want {
		return fmt.Errorf("status %d, want %d (fault_status %s, HTTP-semantic %d): %s", r.Status, want, mode, status, r)
	}
	if got := r.Get("X-Soapgw-Error"); got != cause {
		return fmt.Errorf("X-Soapgw-Error %q, want %q: %s", got, cause, r)
	}
	wantCT, code := "text/xml", "soap:Server"
	if v12 {
		wantCT, code = "application/soap+xml", "env:Receiver"
	}
	if status >= 400 && status < 500 {
		code = map[bool]string{false: "soap:Client", true: "env:Sender"}[v12]
	}
	if ct := r.Get("Content-Type"); !strings.HasPrefix(ct, wantCT) {
		return fmt.Errorf("Content-Type %q, want %s: %s", ct, wantCT, r)
	}
	f, err := frParseFault(r.Body, v12)
	if err != nil {
		return fmt.Errorf("fault does not parse as SOAP 1.2=%v: %v: %s", v12, err, r)
	}
	if f.Code != code {
		return fmt.Errorf("fault code %q, want %q: %s", f.Code, code, r)
	}
	if f.Cause != cause {
		return fmt.Errorf("fault detail cause %q, want %q: %s", f.Cause, cause, r)
	}
	if !strings.HasPrefix(f.Reason, "soapgw: ") {
		return fmt.Errorf("fault reason %q does not name the gateway", f.Reason)
	}
	for _, s := range reason {
		if !strings.Contains(f.Reason, s) {
			return fmt.Errorf("fault reason %q does not contain %q", f.Reason, s)
		}
	}
	if id := r.Get("X-Soapgw-Exchange"); id != f.Exchange {
		return fmt.Errorf("X-Soapgw-Exchange %q differs from the fault's exchange %q", id, f.Exchange)
	}
	return nil
}

func frRequireFault(t testing.TB, r *frResp, status int, cause string, v12 bool, reason ...string) {
	t.Helper()
	require.NoError(t, frCheckFault(r, status, cause, v12, reason...))
}

// frWorld is a recording server standing in for a SOAP service with a few behaviours,
// chosen by path prefix:
//
//	/echo/...   200 with <echo>BODY</echo> at once
//	/slow1/...  the same after 1 s
//	/slow/...   the same after 1.5 s
//	/slow5/...  the same after 5 s
//	/hang/...   never answers (until the test ends)
//	/fault/...  500 with a SOAP 1.1 Fault of its own (frServerFault)
//	/big/...    200 with frBigBody (2 MiB) after 500 ms
type frWorld struct {
	*recordingServer
	stop chan struct{}
}

const frServerFaultBody = `<?xml version="1.0"?><soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><soap:Fault><faultcode>soap:Server</faultcode><faultstring>Account 42 is locked</faultstring><detail/></soap:Fault></soap:Body></soap:Envelope>`

var frServerFault = []byte("HTTP/1.1 500 Internal Server Error\r\n" +
	"Content-Type: text/xml; charset=utf-8\r\n" +
	"X-Server-Trace: abc-123\r\n" +
	"Cache-Control: no-store\r\n" +
	"Content-Length: " + strconv.Itoa(len(frServerFaultBody)) + "\r\n\r\n" + frServerFaultBody)

// frBigBody is a 2 MiB SOAP response: larger than a tunnel stream's window, so its end is
// still queued in the tunnel when the origin's handler returns.
var frBigBody = func() []byte {
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0"?><soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><r>`)
	for i := 0; b.Len() < 2<<20; i++ {
		fmt.Fprintf(&b, "<i n=\"%d\">%08x</i>", i, i*2654435761)
	}
	b.WriteString(`</r></soap:Body></soap:Envelope>`)
	return b.Bytes()
}()

func frStartWorld(t testing.TB) *frWorld {
	t.Helper()
	w := &frWorld{stop: make(chan struct{})}
	wait := func(d time.Duration) bool {
		select {
		case <-time.After(d):
			return true
		case <-w.stop:
			return false
		}
	}
	echo := func(r *recordedRequest) []byte {
		return soapResponse(200, "OK", [][2]string{{"Content-Type", "text/xml; charset=utf-8"}}, frEcho(r.Body))
	}
	w.recordingServer = startRecordingServer(t, func(r *recordedRequest) []byte {
		target := strings.SplitN(string(r.Head), " ", 3)[1]
		switch {
		case strings.HasPrefix(target, "/slow1/"):
			if !wait(time.Second) {
				return nil
			}
		case strings.HasPrefix(target, "/slow5/"):
			if !wait(5 * time.Second) {
				return nil
			}
		case strings.HasPrefix(target, "/slow/"):
			if !wait(1500 * time.Millisecond) {
				return nil
			}
		case strings.HasPrefix(target, "/hang/"):
			wait(time.Minute)
			return nil
		case strings.HasPrefix(target, "/fault/"):
			return frServerFault
		case strings.HasPrefix(target, "/big/"):
			if !wait(500 * time.Millisecond) {
				return nil
			}
			return soapResponse(200, "OK", [][2]string{{"Content-Type", "text/xml; charset=utf-8"}}, frBigBody)
		}
		return echo(r)
	})
	// Registered after the server's own cleanup, so it runs first and frees blocked
	// responders before the server waits for them.
	t.Cleanup(func() { close(w.stop) })
	return w
}

// sawTarget reports whether the server received a whole request for target.
func (w *frWorld) sawTarget(target string) bool {
	for _, r := range w.Requests() {
		if strings.SplitN(string(r.Head), " ", 3)[1] == target {
			return true
		}
	}
	return false
}

// waitTarget waits until the server has received a request for target.
func (w *frWorld) waitTarget(t testing.TB, target string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if w.sawTarget(target) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("upstream did not receive %s within %s", target, within)
}

// frRoute is one edge route: path prefix (may be "") → peer dc1, upstream.
type frRoute struct{ Prefix, Upstream string }

// frEdgeYAML is an edge configuration with custom routes and peer address; extra is
// appended at the top level (limits:, drain_timeout:) and peerExtra inside the peer.
func frEdgeYAML(admin, listen, peerAddr string, routes []frRoute, peerExtra, extra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "node: e2e-edge\nadmin:\n  listen: %s\nedge:\n  listeners:\n    - name: soap\n      listen: %s\n  peers:\n    - name: dc1\n      address: %s\n      connections: 2\n      auth: {key_file: %s}\n%s  routes:\n", admin, listen, peerAddr, tunnelKeyFile, peerExtra)
	for _, r := range routes {
		if r.Prefix != "" {
			fmt.Fprintf(&b, "    - path_prefix: %s\n      peer: dc1\n      upstream: %s\n", r.Prefix, r.Upstream)
		} else {
			fmt.Fprintf(&b, "    - peer: dc1\n      upstream: %s\n", r.Upstream)
		}
	}
	b.WriteString(extra)
	return b.String()
}

// frStartEdge starts an edge in front of the origin whose tunnel listens at tunnel.
func frStartEdge(t testing.TB, tunnel string, routes []frRoute, extra string) (addr string, g *gateway) {
	t.Helper()
	addr, admin := freePort(t), freePort(t)
	return addr, startGateway(t, admin, frEdgeYAML(admin, addr, tunnel, routes, "", extra))
}

// frStartUnready starts a gateway without waiting for /readyz, only for /healthz.
func frStartUnready(t testing.TB, adminAddr, yml string) *gateway {
	t.Helper()
	path := filepath.Join(t.TempDir(), "soapgw.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yml), 0o600))
	g := &gateway{proc: startProc(t, binary, "run", "--config", path, "--log-level", "debug"), admin: adminAddr}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-g.done:
			t.Fatalf("gateway exited early: %v\n%s", g.err, g.out.String())
		default:
		}
		if code, _ := httpGet("http://" + adminAddr + "/healthz"); code == 200 {
			return g
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("gateway not healthy within 10s\n%s", g.out.String())
	return nil
}

// frHealthy checks both admin probes of a running gateway.
func frHealthy(t testing.TB, g *gateway) {
	t.Helper()
	code, body := httpGet("http://" + g.admin + "/healthz")
	require.Equal(t, 200, code, body)
	code, body = httpGet("http://" + g.admin + "/readyz")
	require.Equal(t, 200, code, body)
}

// frRunCLI runs the soapgw binary to completion and returns exit code, stdout, stderr.
func frRunCLI(t testing.TB, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	require.NoError(t, cmd.Start())
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("soapgw %v did not exit within 10s", args)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// ---------------------------------------------------------------------------------------
// Tests.

// TestFailureModes runs one subtest per failure against a shared origin with four
// upstreams: svc (the world server), hang (the same server with response_timeout 300ms),
// down (a closed port), and each subtest's own edge.
func TestFailureModes(t *testing.T) {
	world := frStartWorld(t)
	closedPort := freePort(t)
	a := newPairAddrs(t)
	origin := startGateway(t, a.OriginAdmin, originYAML(a, world.URL(), fmt.Sprintf(`    - name: hang
      url: %s
      response_timeout: 300ms
    - name: down
      url: http://%s
`, world.URL(), closedPort)))

	t.Run("origin_unreachable", func(t *testing.T) {
		t.Parallel()
		tunnel, admin, listen := freePort(t), freePort(t), freePort(t)
		edge := frStartUnready(t, admin, frEdgeYAML(admin, listen, tunnel, []frRoute{{"", "svc"}}, "      dial_timeout: 1s\n", ""))
		for _, v12 := range []bool{false, true} {
			start := time.Now()
			r := frCall(t, listen, "/echo/unreachable", v12, "<x/>", 10*time.Second)
			took := time.Since(start)
			frRequireFault(t, r, 503, "origin_unreachable", v12, `origin "dc1" unreachable`)
			// Bounded by the peer's dial_timeout (1s), not the exchange timeout (10m).
			require.Less(t, took, 3*time.Second, "client waited %s for origin_unreachable", took)
		}
		code, body := httpGet("http://" + admin + "/readyz")
		require.Equal(t, 503, code, body)
		// The edge keeps trying: once an origin listens at the peer address, calls work.
		oa := pairAddrs{Tunnel: tunnel, OriginAdmin: freePort(t)}
		startGateway(t, oa.OriginAdmin, originYAML(oa, world.URL(), ""))
		edge.waitReady(t, 10*time.Second)
		frNormalCall(t, listen, "/echo/after-unreachable")
	})

	t.Run("upstream_refused", func(t *testing.T) {
		t.Parallel()
		addr, edge := frStartEdge(t, a.Tunnel, []frRoute{{"/down/", "down"}, {"", "svc"}}, "")
		for _, v12 := range []bool{false, true} {
			r := frCall(t, addr, "/down/x", v12, "<x/>", 10*time.Second)
			frRequireFault(t, r, 502, "upstream_unreachable", v12, `upstream "down"`, closedPort, "connection refused")
		}
		frNormalCall(t, addr, "/echo/after-refused")
		frHealthy(t, edge)
	})

	t.Run("upstream_timeout", func(t *testing.T) {
		t.Parallel()
		addr, _ := frStartEdge(t, a.Tunnel, []frRoute{{"/hang/", "hang"}, {"", "svc"}}, "")
		for _, v12 := range []bool{false, true} {
			target := fmt.Sprintf("/hang/upstream-timeout-%v", v12)
			start := time.Now()
			r := frCall(t, addr, target, v12, "<x/>", 10*time.Second)
			took := time.Since(start)
			frRequireFault(t, r, 504, "upstream_timeout", v12, `upstream "hang"`, "300ms")
			require.True(t, world.sawTarget(target), "the upstream should have received the request")
			require.Less(t, took, 3*time.Second)
		}
		frNormalCall(t, addr, "/echo/after-upstream-timeout")
	})

	t.Run("upstream_500_fault_passes_through", func(t *testing.T) {
		t.Parallel()
		addr, edge := frStartEdge(t, a.Tunnel, []frRoute{{"", "svc"}}, "")
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		require.NoError(t, err)
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		_, err = c.Write(frSoapRequest(addr, "/fault/x", false, "<x/>"))
		require.NoError(t, err)
		r, err := frReadResponse(br)
		require.NoError(t, err)
		// Byte for byte what the server sent: status line, fields, body.
		require.Equal(t, string(frServerFault), string(r.Raw))
		require.False(t, r.Has("X-Soapgw-Error"))
		require.False(t, r.Has("X-Soapgw-Exchange"))
		// The connection stays usable: the server's fault is an ordinary response.
		body := "<next/>"
		_, err = c.Write(frSoapRequest(addr, "/echo/after-fault", false, body))
		require.NoError(t, err)
		r, err = frReadResponse(br)
		require.NoError(t, err)
		require.Equal(t, 200, r.Status, "%s", r)
		require.Equal(t, string(frEcho([]byte(body))), string(r.Body))
		// Counted as the server's fault, not the gateway's.
		code, m := httpGet("http://" + edge.admin + "/metrics")
		require.Equal(t, 200, code)
		require.Contains(t, m, `soapgw_exchanges_total{code="500",operation="e2e",outcome="soap_fault",role="edge",upstream="svc"} 1`)
		require.Contains(t, m, `soapgw_soap_faults_total{code="Server",role="edge",source="server",upstream="svc"} 1`)
		require.NotContains(t, m, `outcome="gateway_error"`)
		// Every cause's series exists from the start at 0; none may have counted.
		require.NotRegexp(t, `soapgw_gateway_errors_total\{[^}]*\} [1-9]`, m)
	})

	t.Run("request_too_large", func(t *testing.T) {
		t.Parallel()
		addr, _ := frStartEdge(t, a.Tunnel, []frRoute{{"", "svc"}}, "limits:\n  max_request_bytes: 1KiB\n")
		big := strings.Repeat("x", 2000)

		// Content-Length over the limit: refused from the head alone. Only the head is
		// sent, so the refusal is read before any unread body could reset the socket.
		for _, v12 := range []bool{false, true} {
			target := fmt.Sprintf("/echo/too-large-cl-%v", v12)
			req := frSoapRequest(addr, target, v12, big)
			head := req[:bytes.Index(req, []byte("\r\n\r\n"))+4]
			r, err := frExchange(addr, head, 10*time.Second)
			require.NoError(t, err)
			frRequireFault(t, r, 413, "request_too_large", v12, "2000", "1024")
			require.Equal(t, "close", r.Get("Connection"))
			require.False(t, world.sawTarget(target), "the upstream must not see a refused request")
		}

		// Chunked body over the limit.
		chunkedReq := "POST /echo/too-large-chunked HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: text/xml; charset=utf-8\r\nSOAPAction: \"urn:e2e\"\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"320\r\n" + strings.Repeat("a", 0x320) + "\r\n" + "320\r\n" + strings.Repeat("b", 0x320) + "\r\n0\r\n\r\n"
		r, err := frExchange(addr, []byte(chunkedReq), 10*time.Second)
		require.NoError(t, err)
		frRequireFault(t, r, 413, "request_too_large", false, "1024")
		time.Sleep(200 * time.Millisecond)
		require.False(t, world.sawTarget("/echo/too-large-chunked"), "the upstream must never receive the over-limit request whole")

		// Expect: 100-continue with a Content-Length over the limit: 413 at once, never
		// 100 Continue (the client must not send the body).
		req := frSoapRequest(addr, "/echo/too-large-expect", false, big, "Expect: 100-continue")
		head := req[:bytes.Index(req, []byte("\r\n\r\n"))+4]
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		require.NoError(t, err)
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Write(head)
		require.NoError(t, err)
		all, _ := io.ReadAll(c)
		require.NotContains(t, string(all), "100 Continue")
		r, err = frReadResponse(bufio.NewReader(bytes.NewReader(all)))
		require.NoError(t, err, "%q", all)
		frRequireFault(t, r, 413, "request_too_large", false)
		require.False(t, world.sawTarget("/echo/too-large-expect"))

		// A body within the limit still goes through.
		frNormalCall(t, addr, "/echo/after-too-large")
	})

	t.Run("unknown_upstream", func(t *testing.T) {
		t.Parallel()
		addr, _ := frStartEdge(t, a.Tunnel, []frRoute{{"/nope/", "nope"}, {"", "svc"}}, "")
		for _, v12 := range []bool{false, true} {
			target := fmt.Sprintf("/nope/x-%v", v12)
			r := frCall(t, addr, target, v12, "<x/>", 10*time.Second)
			frRequireFault(t, r, 502, "unknown_upstream", v12, `upstream "nope" is not configured`)
			require.False(t, world.sawTarget(target), "no open proxy: nothing may reach any server")
		}
		for _, r := range world.Requests() {
			require.NotContains(t, string(r.Head), "/nope/")
		}
		frNormalCall(t, addr, "/echo/after-unknown-upstream")
	})

	t.Run("malformed_request", func(t *testing.T) {
		t.Parallel()
		addr, edge := frStartEdge(t, a.Tunnel, []frRoute{{"", "svc"}}, "")
		r, err := frExchange(addr, []byte("POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"), 10*time.Second)
		require.NoError(t, err)
		require.Equal(t, 500, r.Status, "a SOAP 1.1 Fault: %s", r)
		require.Equal(t, "400", r.Get("X-Soapgw-Status"))
		require.Equal(t, "bad_request", r.Get("X-Soapgw-Error"))
		require.Equal(t, "close", r.Get("Connection"))
		f, err := frParseFault(r.Body, false)
		require.NoError(t, err, "%s", r)
		require.Equal(t, "soap:Client", f.Code)
		require.Equal(t, "bad_request", f.Cause)
		require.Contains(t, f.Reason, "malformed HTTP request")
		frNormalCall(t, addr, "/echo/after-malformed")
		frHealthy(t, edge)
	})

	t.Run("no_route", func(t *testing.T) {
		t.Parallel()
		addr, _ := frStartEdge(t, a.Tunnel, []frRoute{{"/only", "svc"}}, "")
		for _, v12 := range []bool{false, true} {
			r := frCall(t, addr, "/other", v12, "<x/>", 10*time.Second)
			frRequireFault(t, r, 404, "no_route", v12, `"/other"`)
		}
		require.False(t, world.sawTarget("/other"))
		frNormalCall(t, addr, "/only/echo")
	})

	t.Run("tunnel_lost_mid_exchange", func(t *testing.T) {
		t.Parallel()
		pa := newPairAddrs(t)
		own := startGateway(t, pa.OriginAdmin, originYAML(pa, world.URL(), ""))
		// dial_timeout 1s: how long the edge looks for a connection to collect the
		// response on before it tells the client the outcome is unknown.
		edge := startGateway(t, pa.EdgeAdmin, regexp.MustCompile(`(?m)^      connections: 2$`).ReplaceAllString(edgeYAML(pa, ""),
			"      connections: 2\n      dial_timeout: 1s"))
		type result struct {
			r   *frResp
			err error
			at  time.Time
		}
		done := make(chan result, 1)
		go func() {
			r, err := frExchange(pa.Edge, frSoapRequest(pa.Edge, "/slow1/tunnel-lost", false, "<x/>", "Connection: close"), 15*time.Second)
			done <- result{r, err, time.Now()}
		}()
		world.waitTarget(t, "/slow1/tunnel-lost", 5*time.Second)
		killed := time.Now()
		own.kill() // SIGKILL: no GOAWAY, no drain; the tunnel connections just die
		var res result
		select {
		case res = <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("client still waiting 10s after the origin died")
		}
		require.NoError(t, res.err)
		// The upstream had the call when its origin died: the server may have run it.
		frRequireFault(t, res.r, 502, "outcome_unknown", false, `origin "dc1"`)
		require.Less(t, res.at.Sub(killed), 3*time.Second, "the edge must notice the lost tunnel at once and give up after dial_timeout")

		// The origin comes back on the same addresses; the edge reconnects.
		startGateway(t, pa.OriginAdmin, originYAML(pa, world.URL(), ""))
		edge.waitReady(t, 10*time.Second)
		frNormalCall(t, pa.Edge, "/echo/after-tunnel-lost")
	})

	t.Run("config_errors", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		bad := filepath.Join(dir, "bad.yaml")
		require.NoError(t, os.WriteFile(bad, []byte(`node: x
origin:
  listen: 127.0.0.1:1
  upstreams:
    - name: svc
      url: http://127.0.0.1:2
      respons_timeout: 1s
`), 0o600))
		code, _, stderr := frRunCLI(t, "run", "--config", bad)
		require.Equal(t, 2, code, stderr)
		require.Contains(t, stderr, "bad.yaml:7:")
		require.Contains(t, stderr, "origin.upstreams[0].respons_timeout")

		good := filepath.Join(dir, "good.yaml")
		require.NoError(t, os.WriteFile(good, []byte("origin:\n  listen: 127.0.0.1:1\n  insecure: true\n  upstreams:\n    - name: svc\n      url: http://127.0.0.1:2\n"), 0o600))
		code, stdout, stderr := frRunCLI(t, "config", "check", good)
		require.Equal(t, 0, code, stderr)
		for _, def := range []string{"drain_timeout: 15s", "exchange_timeout: 10m0s", "max_request_bytes: 32MiB", "response_timeout: 0s", "chunked: false", "pool_size: 64", "http_version: \"1.1\""} {
			require.Contains(t, stdout, def)
		}

		code, _, stderr = frRunCLI(t, "frobnicate")
		require.Equal(t, 2, code, stderr)
		require.Contains(t, stderr, "frobnicate")
	})

	t.Cleanup(func() {
		// The shared origin survived every failure.
		code, body := httpGet("http://" + origin.admin + "/healthz")
		assert.Equal(t, 200, code, body)
		select {
		case <-origin.done:
			t.Errorf("shared origin exited: %v", origin.err)
		default:
		}
	})
}

// TestEdgeExchangeTimeoutAnswersFault: when the edge's exchange_timeout passes before the
// origin answers, the client gets a 504 timeout Fault. Regression: the client connection's
// write deadline was the exchange deadline, so the fault itself could not be written.
func TestEdgeExchangeTimeoutAnswersFault(t *testing.T) {
	world := frStartWorld(t)
	a := newPairAddrs(t)
	startGateway(t, a.OriginAdmin, originYAML(a, world.URL(), ""))
	startGateway(t, a.EdgeAdmin, edgeYAML(a, "limits:\n  exchange_timeout: 500ms\n"))
	for _, v12 := range []bool{false, true} {
		start := time.Now()
		r := frCall(t, a.Edge, "/slow/exchange-timeout", v12, "<x/>", 10*time.Second)
		took := time.Since(start)
		frRequireFault(t, r, 504, "timeout", v12, `origin "dc1"`)
		require.GreaterOrEqual(t, took, 450*time.Millisecond)
		require.Less(t, took, 1400*time.Millisecond, "the slow upstream answers after 1.5s; the edge must not wait for it")
	}
	frNormalCall(t, a.Edge, "/echo/after-exchange-timeout")
}
