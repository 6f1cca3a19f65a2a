package e2e

import (
	"bufio"
	"bytes"
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

// recordingServer is an HTTP/1.x server on a raw socket that records every request exactly
// as it arrived (head and body bytes) and answers with a response built by respond. Using
// a raw socket rather than net/http is the point: net/http would canonicalise header names
// and hide exactly the changes a transparent gateway must not make.
type recordingServer struct {
	ln      net.Listener
	respond func(req *recordedRequest) []byte // full raw response bytes

	mu       sync.Mutex
	requests []*recordedRequest
	wg       sync.WaitGroup
}

type recordedRequest struct {
	Head []byte // request line + header fields + CRLF CRLF, as received
	Body []byte // de-chunked body
	Raw  []byte // all bytes of the request as received
}

// Header returns the first value of a field, case-insensitively.
func (r *recordedRequest) Header(name string) string {
	for _, line := range strings.Split(string(r.Head), "\r\n")[1:] {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, name) {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func startRecordingServer(t testing.TB, respond func(req *recordedRequest) []byte) *recordingServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &recordingServer{ln: ln, respond: respond}
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(func() { _ = ln.Close(); s.wg.Wait() })
	return s
}

func (s *recordingServer) URL() string  { return "http://" + s.ln.Addr().String() }
func (s *recordingServer) Addr() string { return s.ln.Addr().String() }

func (s *recordingServer) Requests() []*recordedRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*recordedRequest(nil), s.requests...)
}

func (s *recordingServer) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			s.serveConn(c)
		}()
	}
}

func (s *recordingServer) serveConn(c net.Conn) {
	br := bufio.NewReader(c)
	for {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		req, err := readRawRequest(br)
		if err != nil {
			return
		}
		s.mu.Lock()
		s.requests = append(s.requests, req)
		s.mu.Unlock()
		resp := s.respond(req)
		if resp == nil {
			return // close without answering
		}
		if _, err := c.Write(resp); err != nil {
			return
		}
		if bytes.Contains(bytes.ToLower(resp[:bytes.Index(resp, []byte("\r\n\r\n"))]), []byte("connection: close")) ||
			bytes.HasPrefix(resp, []byte("HTTP/1.0")) {
			return
		}
	}
}

// readRawRequest reads one request, keeping its bytes exactly.
func readRawRequest(br *bufio.Reader) (*recordedRequest, error) {
	var head bytes.Buffer
	for {
		line, err := br.ReadBytes('\n')
		head.Write(line)
		if err != nil {
			return nil, err
		}
		if bytes.Equal(line, []byte("\r\n")) {
			break
		}
	}
	r := &recordedRequest{Head: head.Bytes()}
	raw := bytes.NewBuffer(append([]byte(nil), head.Bytes()...))
	switch {
	case strings.EqualFold(r.Header("Transfer-Encoding"), "chunked"):
		var body bytes.Buffer
		for {
			line, err := br.ReadBytes('\n')
			raw.Write(line)
			if err != nil {
				return nil, err
			}
			sz := strings.TrimSpace(string(line))
			if i := strings.IndexByte(sz, ';'); i >= 0 {
				sz = sz[:i]
			}
			n, err := strconv.ParseInt(sz, 16, 64)
			if err != nil {
				return nil, fmt.Errorf("bad chunk size %q", sz)
			}
			if n == 0 {
				for { // trailers
					l, err := br.ReadBytes('\n')
					raw.Write(l)
					if err != nil {
						return nil, err
					}
					if bytes.Equal(l, []byte("\r\n")) {
						break
					}
				}
				break
			}
			chunk := make([]byte, n+2)
			if _, err := io.ReadFull(br, chunk); err != nil {
				return nil, err
			}
			raw.Write(chunk)
			body.Write(chunk[:n])
		}
		r.Body = body.Bytes()
	case r.Header("Content-Length") != "":
		n, err := strconv.ParseInt(r.Header("Content-Length"), 10, 64)
		if err != nil {
			return nil, err
		}
		r.Body = make([]byte, n)
		if _, err := io.ReadFull(br, r.Body); err != nil {
			return nil, err
		}
		raw.Write(r.Body)
	}
	r.Raw = raw.Bytes()
	return r, nil
}

// soapResponse builds a raw HTTP/1.1 response with a Content-Length body.
func soapResponse(status int, reason string, headers [][2]string, body []byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", status, reason)
	for _, h := range headers {
		fmt.Fprintf(&b, "%s: %s\r\n", h[0], h[1])
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(body))
	b.Write(body)
	return b.Bytes()
}

// smoke: the harness itself works against a pair.
func TestPairSmoke(t *testing.T) {
	srv := startRecordingServer(t, func(r *recordedRequest) []byte {
		return soapResponse(200, "OK", [][2]string{{"Content-Type", "text/xml; charset=utf-8"}}, append([]byte("<r>"), append(r.Body, "</r>"...)...))
	})
	a, _, _ := startPair(t, srv.URL())
	req := "POST /svc HTTP/1.0\r\nHost: " + a.Edge + "\r\nContent-Type: text/xml; charset=utf-8\r\nSOAPAction: \"urn:x\"\r\nContent-Length: 5\r\n\r\nhello"
	resp := rawExchange(t, a.Edge, []byte(req), 5*time.Second)
	require.Contains(t, string(resp), "\r\n\r\n<r>hello</r>")
	require.True(t, bytes.HasPrefix(resp, []byte("HTTP/1.0 200 OK\r\n")), "%q", resp)
	got := srv.Requests()
	require.Len(t, got, 1)
	// Byte for byte: the server saw the client's request line, fields (casing and order)
	// and body; only the HTTP version of the hop may differ.
	want := strings.Replace(req, "HTTP/1.0", "HTTP/1.1", 1)
	require.Equal(t, want, string(got[0].Raw))
}
