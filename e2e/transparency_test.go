package e2e

import (
	"bufio"
	"bytes"
	"errors"
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

// Transparency: raw clients talk to an edge, a recordingServer sits behind the origin, and
// every test compares bytes: what the server received against what the client sent, and
// what the client received against what the server answered. The only differences allowed
// are the ones doc.go documents: the request-line version (HTTP/1.1 upstream, or 1.0 for
// an upstream configured so), hop-by-hop fields, and framing fields added for the next hop
// (Transfer-Encoding: chunked or Content-Length, Connection: keep-alive/close).

// trEnv is one pair in front of one recordingServer. The origin has three upstreams that
// all point at that server: "svc" (HTTP/1.1, the default), "svc10" (http_version "1.0")
// and "chunky" (HTTP/1.1 with chunked: true); the edge routes /v10/ and /chunky/ to
// the last two and everything else to svc.
type trEnv struct {
	srv  *recordingServer
	a    pairAddrs
	host string

	mu      sync.Mutex
	respond func(r *recordedRequest) []byte
}

// trPing is the target of the probe request that checks a client connection is still
// usable after an exchange; the server answers it with trPong.
const trPing = "/__ping"

var trPong = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\npong"

func trStartEnv(t *testing.T) *trEnv {
	t.Helper()
	env := &trEnv{}
	env.srv = startRecordingServer(t, func(r *recordedRequest) []byte {
		if trTarget(r.Head) == trPing {
			return []byte(trPong)
		}
		env.mu.Lock()
		f := env.respond
		env.mu.Unlock()
		if f == nil {
			return soapResponse(500, "No Responder", nil, nil)
		}
		return f(r)
	})
	env.a = newPairAddrs(t)
	url := env.srv.URL()
	extraOrigin := fmt.Sprintf(`    - name: svc10
      url: %s
      http_version: "1.0"
    - name: chunky
      url: %s
      chunked: true
`, url, url)
	startGateway(t, env.a.OriginAdmin, originYAML(env.a, url, extraOrigin))
	edge := edgeYAMLRoutes(env.a, `    - path_prefix: /v10/
      peer: dc1
      upstream: svc10
    - path_prefix: /chunky/
      peer: dc1
      upstream: chunky
`, "")
	startGateway(t, env.a.EdgeAdmin, edge)
	env.host = env.a.Edge
	return env
}

func (env *trEnv) setResponder(f func(r *recordedRequest) []byte) {
	env.mu.Lock()
	env.respond = f
	env.mu.Unlock()
}

// requestsSince returns the requests the server recorded after the first n, probes left
// out.
func (env *trEnv) requestsSince(n int) []*recordedRequest {
	var out []*recordedRequest
	for _, r := range env.srv.Requests()[n:] {
		if trTarget(r.Head) != trPing {
			out = append(out, r)
		}
	}
	return out
}

// trTarget returns the request-target of a request head.
func trTarget(head []byte) string {
	line, _, _ := strings.Cut(string(head), "\r\n")
	parts := strings.Split(line, " ")
	if len(parts) != 3 {
		return ""
	}
	return parts[1]
}

// trMsg builds a raw HTTP message: start line, fields, empty line, body.
func trMsg(start, body string, fields ...string) string {
	var b strings.Builder
	b.WriteString(start)
	b.WriteString("\r\n")
	for _, f := range fields {
		b.WriteString(f)
		b.WriteString("\r\n")
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	return b.String()
}

// trCL returns the Content-Length field for body.
func trCL(body string) string { return "Content-Length: " + strconv.Itoa(len(body)) }

// trChunked encodes chunks in chunked transfer coding; ext[i] (if any) is appended to the
// size line of chunk i (e.g. ";name=value"), trailer lines follow the last chunk.
func trChunked(chunks []string, ext []string, trailer ...string) string {
	var b strings.Builder
	for i, c := range chunks {
		fmt.Fprintf(&b, "%x", len(c))
		if i < len(ext) {
			b.WriteString(ext[i])
		}
		b.WriteString("\r\n")
		b.WriteString(c)
		b.WriteString("\r\n")
	}
	b.WriteString("0\r\n")
	for _, l := range trailer {
		b.WriteString(l)
		b.WriteString("\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// trResponse is one response as a client read it.
type trResponse struct {
	Head    string // status line + fields + CRLF CRLF, as received
	Body    []byte // decoded body
	Status  int
	Chunked bool
}

// trReadResponse reads one response to a request with the given method from br, strictly:
// CRLF line ends everywhere, and a chunked body must be well-formed.
func trReadResponse(br *bufio.Reader, method string) (*trResponse, error) {
	var head bytes.Buffer
	for {
		line, err := br.ReadBytes('\n')
		head.Write(line)
		if err != nil {
			return nil, fmt.Errorf("reading response head (got %q): %w", trShort(head.String()), err)
		}
		if !bytes.HasSuffix(line, []byte("\r\n")) {
			return nil, fmt.Errorf("head line without CRLF: %q", line)
		}
		if len(line) == 2 {
			if head.Len() == 2 {
				return nil, errors.New("response starts with an empty line")
			}
			break
		}
	}
	h := head.String()
	if len(h) < 14 || !strings.HasPrefix(h, "HTTP/1.") || h[8] != ' ' {
		return nil, fmt.Errorf("bad status line in %q", trShort(h))
	}
	status, err := strconv.Atoi(h[9:12])
	if err != nil {
		return nil, fmt.Errorf("bad status code in %q", trShort(h))
	}
	r := &trResponse{Head: h, Status: status}
	te := trHeaderGet(h, "Transfer-Encoding")
	cl := trHeaderGet(h, "Content-Length")
	switch {
	case method == "HEAD" || status < 200 || status == 204 || status == 304:
	case te != "":
		if !strings.EqualFold(te, "chunked") {
			return nil, fmt.Errorf("unexpected Transfer-Encoding %q", te)
		}
		r.Chunked = true
		r.Body, err = trReadChunkedBody(br)
	case cl != "":
		n, perr := strconv.Atoi(cl)
		if perr != nil {
			return nil, fmt.Errorf("bad Content-Length %q", cl)
		}
		r.Body = make([]byte, n)
		_, err = io.ReadFull(br, r.Body)
	default:
		r.Body, err = io.ReadAll(br)
	}
	if err != nil {
		return nil, fmt.Errorf("reading body of %q: %w", trShort(h), err)
	}
	return r, nil
}

func trReadChunkedBody(br *bufio.Reader) ([]byte, error) {
	var body []byte
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		if !strings.HasSuffix(line, "\r\n") {
			return nil, fmt.Errorf("chunk size line without CRLF: %q", line)
		}
		sz, _, _ := strings.Cut(strings.TrimSuffix(line, "\r\n"), ";")
		n, err := strconv.ParseInt(sz, 16, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad chunk size line %q", line)
		}
		if n == 0 {
			for {
				l, err := br.ReadString('\n')
				if err != nil {
					return nil, err
				}
				if l == "\r\n" {
					return body, nil
				}
			}
		}
		chunk := make([]byte, n+2)
		if _, err := io.ReadFull(br, chunk); err != nil {
			return nil, err
		}
		if !bytes.HasSuffix(chunk, []byte("\r\n")) {
			return nil, errors.New("chunk data not followed by CRLF")
		}
		body = append(body, chunk[:n]...)
	}
}

// trHeaderGet returns the first value of a field of a raw head, case-insensitively.
func trHeaderGet(head, name string) string {
	for _, line := range strings.Split(head, "\r\n")[1:] {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, name) {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func trHasToken(head, name, token string) bool {
	for _, line := range strings.Split(head, "\r\n")[1:] {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, name) {
			for _, e := range strings.Split(v, ",") {
				if strings.EqualFold(strings.TrimSpace(e), token) {
					return true
				}
			}
		}
	}
	return false
}

func trShort(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

var trHopByHop = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true, "te": true,
	"transfer-encoding": true, "upgrade": true, "trailer": true,
}

// trForward returns a raw head as the next hop must receive it: start line replaced,
// hop-by-hop fields (and those the Connection field names, except Content-Length and
// Host) removed, extra fields appended, everything else byte for byte and in order.
func trForward(head, start string, extra ...string) string {
	lines := strings.Split(strings.TrimSuffix(head, "\r\n\r\n"), "\r\n")
	named := map[string]bool{}
	for _, l := range lines[1:] {
		if k, v, _ := strings.Cut(l, ":"); strings.EqualFold(k, "Connection") {
			for _, tok := range strings.Split(v, ",") {
				named[strings.ToLower(strings.TrimSpace(tok))] = true
			}
		}
	}
	delete(named, "content-length")
	delete(named, "host")
	fields := []string{}
	for _, l := range lines[1:] {
		k, _, _ := strings.Cut(l, ":")
		if trHopByHop[strings.ToLower(k)] || named[strings.ToLower(k)] {
			continue
		}
		fields = append(fields, l)
	}
	return trMsg(start, "", append(fields, extra...)...)
}

// trClientKeep reports whether a client request asks for a persistent connection.
func trClientKeep(head string) bool {
	line, _, _ := strings.Cut(head, "\r\n")
	if strings.HasSuffix(line, "HTTP/1.0") {
		return trHasToken(head, "Connection", "keep-alive")
	}
	return !trHasToken(head, "Connection", "close")
}

// trExpectedUpstream returns the head the server must receive for a client request (the
// client's head and de-chunked body) and whether the body must reach it chunked: only
// for an upstream with chunked: true; the others get a Content-Length.
func trExpectedUpstream(clientHead string, body []byte, http10, takesChunks bool) (head string, chunked bool) {
	line, _, _ := strings.Cut(clientHead, "\r\n")
	method, rest, _ := strings.Cut(line, " ")
	target, _, _ := strings.Cut(rest, " ")
	start := method + " " + target + " HTTP/1.1"
	var extra []string
	if http10 {
		start = method + " " + target + " HTTP/1.0"
		extra = append(extra, "Connection: keep-alive")
	}
	if strings.EqualFold(trHeaderGet(clientHead, "Transfer-Encoding"), "chunked") {
		if http10 || !takesChunks {
			extra = append(extra, "Content-Length: "+strconv.Itoa(len(body)))
		} else {
			extra = append(extra, "Transfer-Encoding: chunked")
			chunked = true
		}
	}
	return trForward(clientHead, start, extra...), chunked
}

// trExpectedClient returns the final response head and body a client must receive for a
// server's raw response (interim 1xx responses skipped).
func trExpectedClient(t *testing.T, serverResp []byte, method string, clientMinor int, keep bool) (string, []byte) {
	t.Helper()
	br := bufio.NewReader(bytes.NewReader(serverResp))
	var sr *trResponse
	for {
		var err error
		sr, err = trReadResponse(br, method)
		require.NoError(t, err, "test bug: server response does not parse")
		if sr.Status >= 200 {
			break
		}
	}
	statusLine, _, _ := strings.Cut(sr.Head, "\r\n")
	start := fmt.Sprintf("HTTP/1.%d", clientMinor) + statusLine[8:]
	var extra []string
	bodyless := method == "HEAD" || sr.Status == 204 || sr.Status == 304
	if !bodyless && (sr.Chunked || trHeaderGet(sr.Head, "Content-Length") == "") {
		if clientMinor == 1 {
			extra = append(extra, "Transfer-Encoding: chunked")
		} else {
			extra = append(extra, "Content-Length: "+strconv.Itoa(len(sr.Body)))
		}
	}
	if clientMinor == 0 && keep {
		extra = append(extra, "Connection: keep-alive")
	} else if clientMinor == 1 && !keep {
		extra = append(extra, "Connection: close")
	}
	return trForward(sr.Head, start, extra...), sr.Body
}

// trCase is one request/response exchange through the pair.
type trCase struct {
	name      string
	req       string // raw client request
	resp      string // raw server response (may start with interim 1xx responses)
	expect100 bool   // the client sends the head, waits for 100 Continue, then the body
}

// run performs c on a new client connection and checks both directions byte for byte,
// then that the connection is still usable (keep-alive) or closed by the edge.
func (env *trEnv) run(t *testing.T, c trCase) {
	t.Helper()
	env.setResponder(func(*recordedRequest) []byte { return []byte(c.resp) })
	before := len(env.srv.Requests())

	creq, err := readRawRequest(bufio.NewReader(strings.NewReader(c.req)))
	require.NoError(t, err, "test bug: client request does not parse")
	clientHead := string(creq.Head)
	line, _, _ := strings.Cut(clientHead, "\r\n")
	method, _, _ := strings.Cut(line, " ")
	minor := 1
	if strings.HasSuffix(line, "HTTP/1.0") {
		minor = 0
	}
	keep := trClientKeep(clientHead)

	conn, err := net.DialTimeout("tcp", env.a.Edge, 2*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	if c.expect100 {
		_, err = io.WriteString(conn, clientHead)
		require.NoError(t, err)
		const cont = "HTTP/1.1 100 Continue\r\n\r\n"
		got := make([]byte, len(cont))
		_, err = io.ReadFull(br, got)
		require.NoError(t, err, "no 100 Continue before the body was sent")
		require.Equal(t, cont, string(got))
		_, err = io.WriteString(conn, c.req[len(clientHead):])
		require.NoError(t, err)
	} else {
		_, err = io.WriteString(conn, c.req)
		require.NoError(t, err)
	}

	got, err := trReadResponse(br, method)
	require.NoError(t, err)
	wantHead, wantBody := trExpectedClient(t, []byte(c.resp), method, minor, keep)
	require.Equal(t, wantHead, got.Head, "response head at the client")
	require.True(t, bytes.Equal(wantBody, got.Body), "response body at the client differs: got %d bytes %q, want %d bytes %q",
		len(got.Body), trShort(string(got.Body)), len(wantBody), trShort(string(wantBody)))

	// The server side.
	target := trTarget(creq.Head)
	http10 := strings.HasPrefix(target, "/v10/")
	takesChunks := strings.HasPrefix(target, "/chunky/")
	upHead, upChunked := trExpectedUpstream(clientHead, creq.Body, http10, takesChunks)
	reqs := env.requestsSince(before)
	require.Len(t, reqs, 1, "requests at the server")
	require.Equal(t, upHead, string(reqs[0].Head), "request head at the server")
	require.True(t, bytes.Equal(creq.Body, reqs[0].Body), "request body at the server differs: got %q, want %q",
		trShort(string(reqs[0].Body)), trShort(string(creq.Body)))
	if !upChunked {
		// Not re-framed: the whole request is byte-exact.
		require.Equal(t, upHead+string(creq.Body), string(reqs[0].Raw))
	} else {
		require.True(t, strings.HasSuffix(string(reqs[0].Raw), "\r\n0\r\n\r\n") || len(creq.Body) == 0,
			"re-chunked body should end without trailers: %q", trShort(string(reqs[0].Raw[len(reqs[0].Head):])))
	}

	if keep {
		trProbe(t, conn, br, minor)
	} else {
		trExpectClosed(t, conn, br)
	}
}

// trProbe sends a small request on conn and requires its answer: the connection is still
// in sync and usable.
func trProbe(t *testing.T, conn net.Conn, br *bufio.Reader, minor int) {
	t.Helper()
	req := "GET " + trPing + " HTTP/1.1\r\nHost: probe\r\n\r\n"
	want := trPong
	if minor == 0 {
		req = "GET " + trPing + " HTTP/1.0\r\nHost: probe\r\nConnection: keep-alive\r\n\r\n"
		want = "HTTP/1.0 200 OK\r\nContent-Length: 4\r\nConnection: keep-alive\r\n\r\npong"
	}
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, err := io.WriteString(conn, req)
	require.NoError(t, err, "connection not usable after the exchange")
	got, err := trReadResponse(br, "GET")
	require.NoError(t, err, "connection not usable after the exchange")
	require.Equal(t, want, got.Head+string(got.Body))
}

// trExpectClosed requires the edge to close conn with nothing more to read.
func trExpectClosed(t *testing.T, conn net.Conn, br *bufio.Reader) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	rest, err := io.ReadAll(br)
	require.NoError(t, err, "edge did not close the connection cleanly")
	require.Empty(t, string(rest), "bytes after the response")
}

func trBinary(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/256)
	}
	return string(b)
}

// TestTransparencyExchanges runs a table of client styles and server answers through a
// pair and compares both directions byte for byte.
func TestTransparencyExchanges(t *testing.T) {
	t.Parallel()
	env := trStartEnv(t)
	host := env.host

	soap11 := `<?xml version="1.0" encoding="UTF-8"?><soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"><soapenv:Body><ns1:echo xmlns:ns1="urn:e2e"><text>hello</text></ns1:echo></soapenv:Body></soapenv:Envelope>`
	soap11Resp := `<?xml version="1.0" encoding="utf-8"?><soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><echoResponse xmlns="urn:e2e"><return>hello</return></echoResponse></soap:Body></soap:Envelope>`
	soap12 := `<?xml version="1.0" encoding="utf-8"?><env:Envelope xmlns:env="http://www.w3.org/2003/05/soap-envelope"><env:Body><x:ping xmlns:x="urn:x"/></env:Body></env:Envelope>`
	fault := `<?xml version="1.0" encoding="utf-8"?><soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><soap:Fault><faultcode>soap:Client</faultcode><faultstring>Rejected</faultstring></soap:Fault></soap:Body></soap:Envelope>`
	wsdl := `<?xml version="1.0" encoding="UTF-8"?><wsdl:definitions xmlns:wsdl="http://schemas.xmlsoap.org/wsdl/" targetNamespace="urn:e2e" name="Svc"><wsdl:service name="Svc"/></wsdl:definitions>`
	nonASCII := `<?xml version="1.0" encoding="UTF-8"?><s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body><echo xmlns="urn:e2e">Grüße, 東京, Ελλάδα, emoji 🚀 — ½ €</echo></s:Body></s:Envelope>`
	boundary := "uuid:6b62cda9-3f8a-4b2c-9f5e-0123456789ab"
	mtom := "--" + boundary + "\r\n" +
		"Content-Type: application/xop+xml; charset=UTF-8; type=\"text/xml\"\r\nContent-Transfer-Encoding: binary\r\nContent-ID: <root.message@cxf.apache.org>\r\n\r\n" +
		`<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><up xmlns="urn:e2e"><data><xop:Include xmlns:xop="http://www.w3.org/2004/08/xop/include" href="cid:bin@e2e"/></data></up></soap:Body></soap:Envelope>` +
		"\r\n--" + boundary + "\r\nContent-Type: application/octet-stream\r\nContent-Transfer-Encoding: binary\r\nContent-ID: <bin@e2e>\r\n\r\n" +
		trBinary(4096) + "\xff\xfe\x00\r\n\r\n\x80" + "\r\n--" + boundary + "--\r\n"
	mtomCT := `Content-Type: multipart/related; type="application/xop+xml"; boundary="` + boundary + `"; start="<root.message@cxf.apache.org>"; start-info="text/xml"`
	long := strings.Repeat("0123456789abcdef", 512) // 8 KiB
	resp := func(status, body string, fields ...string) string {
		return trMsg(status, body, append(fields, trCL(body))...)
	}
	chunkedReqBody := trChunked([]string{"<soap:Envelope>", "<b>", strings.Repeat("x", 5000), "</b></soap:Envelope>"},
		[]string{";name=value", `;q="quoted ext"`, "", ";last"}, "X-Checksum: abc123", "X-Other: 1")
	chunkedReqFields := func() []string {
		return []string{"Host: " + host, "Content-Type: text/xml; charset=utf-8", `SOAPAction: "urn:chunked"`,
			"Transfer-Encoding: chunked", "Trailer: X-Checksum, X-Other", "X-After: te"}
	}
	chunkedResp := trMsg("HTTP/1.1 200 OK", trChunked([]string{"<r>", strings.Repeat("é", 3000), "\x00\xff</r>"}, []string{";a=b", "", ";z"}, "X-Resp-Trailer: t"),
		"Content-Type: text/xml; charset=utf-8", "Transfer-Encoding: chunked", "Trailer: X-Resp-Trailer", "X-After: 1")
	var bigParts []string
	for i := range 40 {
		bigParts = append(bigParts, trBinary(50000+i))
	}
	bigChunked := trChunked(bigParts, nil)
	closeDelimited := trMsg("HTTP/1.0 200 OK", "<big>"+trBinary(200<<10)+"</big>", "Content-Type: application/octet-stream", "X-Kind: close-delimited")

	cases := []trCase{
		{
			name: "axis_http10_no_keepalive",
			req: trMsg("POST /axis/services/EchoService HTTP/1.0", soap11,
				"Content-Type: text/xml; charset=utf-8",
				"Accept: application/soap+xml, application/dime, multipart/related, text/*",
				"User-Agent: Axis/1.4", "Host: "+host, "Cache-Control: no-cache", "Pragma: no-cache",
				`SOAPAction: ""`, trCL(soap11)),
			resp: resp("HTTP/1.1 200 OK", soap11Resp, "Content-Type: text/xml;charset=utf-8", "Date: Sat, 22 Nov 2025 10:00:00 GMT"),
		},
		{
			name: "dotnet_http11_expect_100_continue",
			req: trMsg("POST /Service.asmx HTTP/1.1", soap11,
				"User-Agent: Mozilla/4.0 (compatible; MSIE 6.0; MS Web Services Client Protocol 4.0.30319.42000)",
				"VsDebuggerCausalityData: uIDPo2V0l1nS0h9LtNz3ZX3yB8AAAAAA",
				"Content-Type: text/xml; charset=utf-8", `SOAPAction: "http://tempuri.org/Echo"`,
				"Host: "+host, trCL(soap11), "Expect: 100-continue", "Connection: Keep-Alive"),
			resp: resp("HTTP/1.1 200 OK", soap11Resp, "Cache-Control: private, max-age=0",
				"Content-Type: text/xml; charset=utf-8", "Server: Microsoft-IIS/10.0",
				"X-AspNet-Version: 4.0.30319", "X-Powered-By: ASP.NET"),
			expect100: true,
		},
		{
			// The server sends its own 100 Continue: the client must still see exactly one.
			name: "expect_100_continue_upstream_interim",
			req: trMsg("POST /Service.asmx HTTP/1.1", soap11, "Host: "+host,
				"Content-Type: text/xml; charset=utf-8", `SOAPAction: "urn:interim"`, trCL(soap11), "Expect: 100-continue"),
			resp:      "HTTP/1.1 100 Continue\r\n\r\n" + resp("HTTP/1.1 200 OK", soap11Resp, "Content-Type: text/xml; charset=utf-8"),
			expect100: true,
		},
		{
			name: "soap12_action_parameter",
			req: trMsg("POST /soap12 HTTP/1.1", soap12, "Host: "+host,
				`Content-Type: application/soap+xml; charset=utf-8; action="urn:x"`, trCL(soap12)),
			resp: resp("HTTP/1.1 200 OK", soap12, "Content-Type: application/soap+xml; charset=utf-8"),
		},
		{
			name: "wsdl_get",
			req:  trMsg("GET /svc?wsdl HTTP/1.1", "", "Host: "+host, "User-Agent: gSOAP/2.8", "Accept: */*"),
			resp: resp("HTTP/1.1 200 OK", wsdl, "Content-Type: text/xml; charset=utf-8"),
		},
		{
			name: "wsdl_get_http10",
			req:  trMsg("GET /svc?WSDL HTTP/1.0", "", "Host: "+host),
			resp: resp("HTTP/1.1 200 OK", wsdl, "Content-Type: text/xml; charset=utf-8"),
		},
		{
			name: "mtom_multipart_binary",
			req: trMsg("POST /mtom HTTP/1.1", mtom, "Host: "+host, mtomCT, "MIME-Version: 1.0",
				`SOAPAction: "urn:upload"`, trCL(mtom)),
			resp: resp("HTTP/1.1 200 OK", mtom, mtomCT, "MIME-Version: 1.0"),
		},
		{
			name: "non_ascii_utf8_body_and_field_value",
			req: trMsg("POST /utf8 HTTP/1.1", nonASCII, "Host: "+host, "Content-Type: text/xml; charset=utf-8",
				`SOAPAction: "urn:ünïcode"`, "X-Name: Grüße 東京", trCL(nonASCII)),
			resp: resp("HTTP/1.1 200 OK", nonASCII, "Content-Type: text/xml; charset=utf-8", "X-Name: Ελλάδα"),
		},
		{
			name: "odd_casing_repeated_and_long_fields",
			req: trMsg("POST /odd HTTP/1.1", soap11, "host: "+host, "SOAPAction: \"urn:Odd\"",
				"x-CUSTOM-Header: MiXeD Value", "X-Dup: first", "content-type: text/xml; charset=utf-8",
				"X-Dup: second", "X-Long: "+long, "Cookie: a=1", "Cookie: b=2", "X-Empty:", trCL(soap11)),
			resp: trMsg("HTTP/1.1 200 OK", soap11Resp, "x-RESPONSE-Casing: yes", "Set-Cookie: a=1; Path=/",
				"X-Dup: one", "Set-Cookie: b=2; Path=/", "X-Dup: two", "X-Long-Resp: "+long, "X-Empty:",
				"content-length: "+strconv.Itoa(len(soap11Resp))),
		},
		{
			name: "reason_299_fine_thanks",
			req:  trMsg("POST /reason HTTP/1.1", soap11, "Host: "+host, "Content-Type: text/xml", trCL(soap11)),
			resp: resp("HTTP/1.1 299 Fine Thanks", soap11Resp, "Content-Type: text/xml"),
		},
		{
			name: "reason_299_fine_thanks_http10_keepalive",
			req: trMsg("POST /reason HTTP/1.0", soap11, "Host: "+host, "Content-Type: text/xml",
				"Connection: keep-alive", trCL(soap11)),
			resp: resp("HTTP/1.1 299 Fine Thanks", soap11Resp, "Content-Type: text/xml"),
		},
		{
			name: "empty_reason",
			req:  trMsg("POST /reason HTTP/1.1", soap11, "Host: "+host, "Content-Type: text/xml", trCL(soap11)),
			resp: resp("HTTP/1.1 200 ", soap11Resp, "Content-Type: text/xml"),
		},
		{
			name: "soap_fault_500_http10",
			req:  trMsg("POST /fault HTTP/1.0", soap11, "Host: "+host, "Content-Type: text/xml", `SOAPAction: "urn:fail"`, trCL(soap11)),
			resp: resp("HTTP/1.1 500 Internal Server Error", fault, "Content-Type: text/xml; charset=utf-8"),
		},
		{
			name: "hop_by_hop_fields_removed",
			req: trMsg("POST /hop HTTP/1.1", soap11, "Host: "+host, "Connection: keep-alive, X-Hop-Opt",
				"X-Hop-Opt: secret", "Keep-Alive: timeout=30", "TE: trailers", "Proxy-Connection: keep-alive",
				"Content-Type: text/xml", "X-End: kept", trCL(soap11)),
			resp: resp("HTTP/1.1 200 OK", soap11Resp, "Connection: Keep-Alive, X-Resp-Hop", "Keep-Alive: timeout=5, max=100",
				"X-Resp-Hop: x", "Content-Type: text/xml", "X-Resp-End: kept"),
		},
		{
			name: "http11_client_connection_close",
			req:  trMsg("POST /close HTTP/1.1", soap11, "Host: "+host, "Content-Type: text/xml", "Connection: close", trCL(soap11)),
			resp: resp("HTTP/1.1 200 OK", soap11Resp, "Content-Type: text/xml"),
		},
		{
			name: "chunked_request_ext_trailer_to_default_upstream",
			req:  trMsg("POST /chunked HTTP/1.1", chunkedReqBody, chunkedReqFields()...),
			resp: resp("HTTP/1.1 200 OK", soap11Resp, "Content-Type: text/xml"),
		},
		{
			name: "chunked_request_to_http10_upstream",
			req:  trMsg("POST /v10/chunked HTTP/1.1", chunkedReqBody, chunkedReqFields()...),
			resp: resp("HTTP/1.1 200 OK", soap11Resp, "Content-Type: text/xml"),
		},
		{
			name: "chunked_request_to_chunked_true_upstream",
			req:  trMsg("POST /chunky/chunked HTTP/1.1", chunkedReqBody, chunkedReqFields()...),
			resp: resp("HTTP/1.1 200 OK", soap11Resp, "Content-Type: text/xml"),
		},
		{
			name: "content_length_request_to_http10_upstream",
			req:  trMsg("POST /v10/cl HTTP/1.1", soap11, "Host: "+host, "Content-Type: text/xml", `SOAPAction: "urn:v10"`, trCL(soap11)),
			resp: resp("HTTP/1.0 200 OK", soap11Resp, "Content-Type: text/xml"),
		},
		{
			name: "close_delimited_response_http11_client",
			req:  trMsg("POST /cd HTTP/1.1", soap11, "Host: "+host, "Content-Type: text/xml", trCL(soap11)),
			resp: closeDelimited,
		},
		{
			name: "close_delimited_response_http10_client",
			req:  trMsg("POST /cd HTTP/1.0", soap11, "Host: "+host, "Content-Type: text/xml", trCL(soap11)),
			resp: closeDelimited,
		},
		{
			name: "close_delimited_response_http10_keepalive_client",
			req:  trMsg("POST /cd HTTP/1.0", soap11, "Host: "+host, "Content-Type: text/xml", "Connection: keep-alive", trCL(soap11)),
			resp: closeDelimited,
		},
		{
			name: "chunked_response_http11_client",
			req:  trMsg("POST /cr HTTP/1.1", soap11, "Host: "+host, "Content-Type: text/xml", trCL(soap11)),
			resp: chunkedResp,
		},
		{
			name: "chunked_response_http10_client",
			req:  trMsg("POST /cr HTTP/1.0", soap11, "Host: "+host, "Content-Type: text/xml", trCL(soap11)),
			resp: chunkedResp,
		},
		{
			// Expect is an HTTP/1.1 mechanism: an HTTP/1.0 client must never see a 1xx.
			name: "http10_client_with_expect_gets_no_100",
			req: trMsg("POST /x HTTP/1.0", soap11, "Host: "+host, "Content-Type: text/xml",
				"Expect: 100-continue", trCL(soap11)),
			resp: resp("HTTP/1.1 200 OK", soap11Resp, "Content-Type: text/xml"),
		},
		{
			name: "post_content_length_zero",
			req:  trMsg("POST /zero HTTP/1.1", "", "Host: "+host, "Content-Type: text/xml", `SOAPAction: "urn:zero"`, "Content-Length: 0"),
			resp: resp("HTTP/1.1 200 OK", soap11Resp, "Content-Type: text/xml"),
		},
		{
			name: "chunked_request_empty_body",
			req:  trMsg("POST /chunked-empty HTTP/1.1", "0\r\n\r\n", "Host: "+host, "Transfer-Encoding: chunked"),
			resp: resp("HTTP/1.1 200 OK", soap11Resp, "Content-Type: text/xml"),
		},
		{
			// The server closes its connection; the client's stays open.
			name: "server_connection_close_client_keeps",
			req:  trMsg("POST /sc HTTP/1.1", soap11, "Host: "+host, "Content-Type: text/xml", trCL(soap11)),
			resp: resp("HTTP/1.1 200 OK", soap11Resp, "Content-Type: text/xml", "Connection: close"),
		},
		{
			name: "reason_with_tab_and_obs_text_status_599",
			req:  trMsg("POST /reason HTTP/1.1", soap11, "Host: "+host, "Content-Type: text/xml", trCL(soap11)),
			resp: resp("HTTP/1.1 599 Très\tbien  merci", soap11Resp, "Content-Type: text/xml"),
		},
		{
			name: "close_delimited_empty_response_http11_client",
			req:  trMsg("POST /cde HTTP/1.1", soap11, "Host: "+host, "Content-Type: text/xml", trCL(soap11)),
			resp: trMsg("HTTP/1.0 200 OK", "", "Content-Type: text/xml"),
		},
		{
			name: "close_delimited_empty_response_http10_client",
			req:  trMsg("POST /cde HTTP/1.0", soap11, "Host: "+host, "Content-Type: text/xml", trCL(soap11)),
			resp: trMsg("HTTP/1.0 200 OK", "", "Content-Type: text/xml"),
		},
		{
			name: "chunked_empty_response",
			req:  trMsg("POST /ce HTTP/1.1", soap11, "Host: "+host, "Content-Type: text/xml", trCL(soap11)),
			resp: trMsg("HTTP/1.1 200 OK", "0\r\n\r\n", "Content-Type: text/xml", "Transfer-Encoding: chunked"),
		},
		{
			name: "304_not_modified_http10",
			req:  trMsg("GET /svc?wsdl HTTP/1.0", "", "Host: "+host, `If-None-Match: "v1"`),
			resp: trMsg("HTTP/1.1 304 Not Modified", "", `ETag: "v1"`),
		},
		{
			name: "expect_100_continue_chunked_streamed_body",
			req: trMsg("POST /Service.asmx HTTP/1.1", bigChunked, "Host: "+host, "Content-Type: text/xml; charset=utf-8",
				`SOAPAction: "urn:big"`, "Expect: 100-continue", "Transfer-Encoding: chunked"),
			resp:      resp("HTTP/1.1 200 OK", soap11Resp, "Content-Type: text/xml; charset=utf-8"),
			expect100: true,
		},
		{
			// SOAP's HTTP Extension Framework method, a target with matrix parameters,
			// percent-escapes, a query and raw UTF-8.
			name: "m_post_method_and_odd_target",
			req: trMsg("M-POST /svc/%7Eu;jsessionid=AbC.1/x%20y?a=1&b=%C3%A9&c=é&d HTTP/1.1", soap11, "Host: "+host,
				"Content-Type: text/xml", `Man: "http://schemas.xmlsoap.org/soap/envelope/"; ns=01`, `01-SOAPAction: "urn:m"`, trCL(soap11)),
			resp: resp("HTTP/1.1 200 OK", soap11Resp, "Content-Type: text/xml", "Ext:"),
		},
		{
			name: "head_request",
			req:  trMsg("HEAD /svc?wsdl HTTP/1.1", "", "Host: "+host),
			resp: trMsg("HTTP/1.1 200 OK", "", "Content-Type: text/xml; charset=utf-8", "Content-Length: 1234"),
		},
		{
			name: "head_request_http10_keepalive",
			req:  trMsg("HEAD /svc?wsdl HTTP/1.0", "", "Host: "+host, "Connection: keep-alive"),
			resp: trMsg("HTTP/1.1 200 OK", "", "Content-Type: text/xml; charset=utf-8", "Content-Length: 1234"),
		},
		{
			name: "204_no_content",
			req:  trMsg("POST /oneway HTTP/1.1", soap11, "Host: "+host, "Content-Type: text/xml", `SOAPAction: "urn:oneway"`, trCL(soap11)),
			resp: trMsg("HTTP/1.1 204 No Content", "", "X-Oneway: accepted"),
		},
		{
			name: "202_accepted_empty_body",
			req:  trMsg("POST /oneway HTTP/1.1", soap11, "Host: "+host, "Content-Type: text/xml", trCL(soap11)),
			resp: resp("HTTP/1.1 202 Accepted", "", "Content-Type: text/xml"),
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { env.run(t, c) })
	}
}

// TestTransparencyHTTP10KeepAlive: an HTTP/1.0 client asking for keep-alive gets several
// exchanges on one connection, each answered with a Content-Length (also when the server's
// body was close-delimited) and "Connection: keep-alive".
func TestTransparencyHTTP10KeepAlive(t *testing.T) {
	t.Parallel()
	env := trStartEnv(t)
	bodies := []string{"<first/>", "<second>" + strings.Repeat("2", 3000) + "</second>", "<third/>"}
	env.setResponder(func(r *recordedRequest) []byte {
		switch string(r.Body) {
		case bodies[1]:
			// Close-delimited: the edge must buffer it to give the 1.0 client a length.
			return []byte(trMsg("HTTP/1.0 200 OK", "<r2>"+string(r.Body)+"</r2>", "Content-Type: text/xml"))
		default:
			b := "<r>" + string(r.Body) + "</r>"
			return []byte(trMsg("HTTP/1.1 200 OK", b, "Content-Type: text/xml", trCL(b)))
		}
	})
	conn, err := net.DialTimeout("tcp", env.a.Edge, 2*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	for i, body := range bodies {
		req := trMsg("POST /k HTTP/1.0", body, "Host: "+env.host, "Content-Type: text/xml", "Connection: keep-alive", trCL(body))
		_, err := io.WriteString(conn, req)
		require.NoError(t, err, "request %d", i)
		got, err := trReadResponse(br, "POST")
		require.NoError(t, err, "request %d", i)
		want := "<r>" + body + "</r>"
		if i == 1 {
			want = "<r2>" + body + "</r2>"
		}
		wantHead := trMsg("HTTP/1.0 200 OK", "", "Content-Type: text/xml", trCL(want), "Connection: keep-alive")
		require.Equal(t, wantHead, got.Head, "response %d", i)
		require.Equal(t, want, string(got.Body), "response %d", i)
	}
	reqs := env.requestsSince(0)
	require.Len(t, reqs, len(bodies))
	for i, r := range reqs {
		require.Equal(t, trMsg("POST /k HTTP/1.1", bodies[i], "Host: "+env.host, "Content-Type: text/xml", trCL(bodies[i])), string(r.Raw))
	}
	// Still open: closing is the client's decision.
	trProbe(t, conn, br, 0)
}

// TestTransparencyPipelining: five HTTP/1.1 requests in one write are answered in order,
// each response identifying its request; the last asks to close.
func TestTransparencyPipelining(t *testing.T) {
	t.Parallel()
	env := trStartEnv(t)
	env.setResponder(func(r *recordedRequest) []byte {
		seq, _ := strconv.Atoi(r.Header("X-Seq"))
		// Earlier requests are answered more slowly: a gateway that answered pipelined
		// requests concurrently would reorder them.
		time.Sleep(time.Duration(5-seq) * 15 * time.Millisecond)
		b := fmt.Sprintf("<resp seq=%q>%s</resp>", r.Header("X-Seq"), r.Body)
		return []byte(trMsg("HTTP/1.1 200 OK", b, "Content-Type: text/xml", "X-Seq: "+r.Header("X-Seq"), trCL(b)))
	})
	var all strings.Builder
	var reqs []string
	for i := 1; i <= 5; i++ {
		var req string
		switch i {
		case 2:
			req = trMsg("GET /p?wsdl HTTP/1.1", "", "Host: "+env.host, "X-Seq: 2")
		case 3:
			req = trMsg("POST /p HTTP/1.1", trChunked([]string{"<chun", "ked/>"}, nil),
				"Host: "+env.host, "X-Seq: 3", "Transfer-Encoding: chunked")
		case 5:
			b := "<req5/>"
			req = trMsg("POST /p HTTP/1.1", b, "Host: "+env.host, "X-Seq: 5", "Connection: close", trCL(b))
		default:
			b := fmt.Sprintf("<req%d>%s</req%d>", i, strings.Repeat("p", i*1000), i)
			req = trMsg("POST /p HTTP/1.1", b, "Host: "+env.host, "X-Seq: "+strconv.Itoa(i), trCL(b))
		}
		reqs = append(reqs, req)
		all.WriteString(req)
	}
	conn, err := net.DialTimeout("tcp", env.a.Edge, 2*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.WriteString(conn, all.String())
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	for i := 1; i <= 5; i++ {
		creq, err := readRawRequest(bufio.NewReader(strings.NewReader(reqs[i-1])))
		require.NoError(t, err)
		got, err := trReadResponse(br, "POST")
		require.NoError(t, err, "response %d", i)
		b := fmt.Sprintf("<resp seq=\"%d\">%s</resp>", i, creq.Body)
		fields := []string{"Content-Type: text/xml", "X-Seq: " + strconv.Itoa(i), trCL(b)}
		if i == 5 {
			fields = append(fields, "Connection: close")
		}
		require.Equal(t, trMsg("HTTP/1.1 200 OK", "", fields...), got.Head, "response %d", i)
		require.Equal(t, b, string(got.Body), "response %d", i)
	}
	trExpectClosed(t, conn, br)
	got := env.requestsSince(0)
	require.Len(t, got, 5)
	for i, r := range got {
		require.Equal(t, strconv.Itoa(i+1), r.Header("X-Seq"), "order at the server")
	}
}

// TestTransparencyClientHalfClose: a client that shuts down its sending side after the
// request (as some HTTP/1.0 scripts and tools do) still gets the whole response.
func TestTransparencyClientHalfClose(t *testing.T) {
	t.Parallel()
	env := trStartEnv(t)
	body := "<half-close/>"
	env.setResponder(func(r *recordedRequest) []byte {
		time.Sleep(50 * time.Millisecond) // the FIN reaches the edge before the answer
		b := "<r>" + string(r.Body) + "</r>"
		return []byte(trMsg("HTTP/1.1 200 OK", b, "Content-Type: text/xml", trCL(b)))
	})
	for _, version := range []string{"HTTP/1.0", "HTTP/1.1"} {
		t.Run(version, func(t *testing.T) {
			c, err := net.DialTimeout("tcp", env.a.Edge, 2*time.Second)
			require.NoError(t, err)
			conn := c.(*net.TCPConn)
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			_, err = io.WriteString(conn, trMsg("POST /hc "+version, body, "Host: "+env.host, "Content-Type: text/xml", trCL(body)))
			require.NoError(t, err)
			require.NoError(t, conn.CloseWrite())
			got, err := io.ReadAll(conn)
			require.NoError(t, err)
			b := "<r>" + body + "</r>"
			fields := []string{"Content-Type: text/xml", trCL(b)}
			if version == "HTTP/1.1" {
				// The edge may or may not announce the close it will make after seeing
				// the client's FIN; both are correct.
				if strings.Contains(string(got), "Connection: close\r\n") {
					fields = append(fields, "Connection: close")
				}
			}
			require.Equal(t, trMsg(version+" 200 OK", b, fields...), string(got))
		})
	}
}
