package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxBody bounds what the replay server and the client read (the biggest generated
// message, a Northwind DataSet, is under 0.5 MB).
const maxBody = 64 << 20

// ReplayServer answers each request with the generated response of the exchange named
// by its CallHeader, after checking that the request body is the generated request,
// byte for byte. A request that is unknown or differs gets a 500 whose body starts with
// "replay:", which the client reports as a mismatch.
type ReplayServer struct {
	ln  net.Listener
	srv *http.Server

	mu        sync.RWMutex
	scenarios map[string]*Scenario

	requests atomic.Int64
	bad      atomic.Int64
	done     chan struct{}
}

// StartReplayServer listens on the site's address (port 0: any) and serves.
func StartReplayServer(site Site, port int) (*ReplayServer, error) {
	ln, err := site.Listen("tcp", netip.AddrPortFrom(site.Addr(), uint16(port)).String())
	if err != nil {
		return nil, fmt.Errorf("replay server: %w", err)
	}
	r := &ReplayServer{ln: ln, scenarios: map[string]*Scenario{}, done: make(chan struct{})}
	r.srv = &http.Server{
		Handler:           r,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	go func() {
		defer close(r.done)
		_ = r.srv.Serve(ln)
	}()
	return r, nil
}

// Addr is the listening address.
func (r *ReplayServer) Addr() netip.AddrPort {
	return r.ln.Addr().(*net.TCPAddr).AddrPort()
}

// Add makes the server answer the scenario's calls (replacing one of the same name).
func (r *ReplayServer) Add(s *Scenario) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.scenarios[s.Name] = s
}

// Counts reports the requests served and those refused (unknown or differing).
func (r *ReplayServer) Counts() (requests, bad int64) { return r.requests.Load(), r.bad.Load() }

// Close stops the server and closes its connections.
func (r *ReplayServer) Close() error {
	err := r.srv.Close()
	<-r.done
	return err
}

func (r *ReplayServer) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.requests.Add(1)
	fail := func(format string, args ...any) {
		r.bad.Add(1)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, "replay: "+format+"\n", args...)
	}
	if req.Method != http.MethodPost {
		fail("method %s, want POST", req.Method)
		return
	}
	c, err := r.lookup(req.Header.Get(CallHeader))
	if err != nil {
		fail("%v", err)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxBody+1))
	if err != nil {
		fail("reading request body: %v", err)
		return
	}
	if !bytes.Equal(body, c.Request) {
		fail("request body differs from the generated request (%d bytes, want %d; first difference at byte %d)",
			len(body), len(c.Request), firstDiff(body, c.Request))
		return
	}
	w.Header().Set("Content-Type", contentType(c.Response))
	w.Header().Set("Content-Length", strconv.Itoa(len(c.Response)))
	_, _ = w.Write(c.Response)
}

func (r *ReplayServer) lookup(key string) (Call, error) {
	name, idx, ok := strings.Cut(key, "/")
	if !ok {
		return Call{}, fmt.Errorf("header %s %q: want <scenario>/<index>", CallHeader, key)
	}
	i, err := strconv.Atoi(idx)
	if err != nil {
		return Call{}, fmt.Errorf("header %s %q: bad index", CallHeader, key)
	}
	r.mu.RLock()
	s := r.scenarios[name]
	r.mu.RUnlock()
	if s == nil || i < 0 || i >= len(s.Calls) {
		return Call{}, fmt.Errorf("header %s %q: no such exchange", CallHeader, key)
	}
	return s.Calls[i], nil
}

// firstDiff is the index of the first differing byte (len of the shorter if one is a
// prefix of the other).
func firstDiff(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// Target is where the bench client sends its calls.
type Target struct {
	Site Site   // where the client runs
	Addr string // host:port to dial
	Host string // Host header
}

// ErrMismatch marks a call whose response is not the generated one.
var ErrMismatch = errors.New("response mismatch")

// CallOnce makes exchange i of s the way a legacy HTTP/1.0 client does: a new TCP
// connection, the whole request in one write, the response read to its end, the
// connection closed. It verifies the status and every byte of the response body; a
// wrong response is an error wrapping ErrMismatch.
func CallOnce(ctx context.Context, t Target, s *Scenario, i int) error {
	req := appendRequest(nil, s.spec.Path, s.requestHeaders(t.Host, i), s.Calls[i].Request)
	conn, err := t.Site.DialContext(ctx, "tcp", t.Addr)
	if err != nil {
		return fmt.Errorf("dial %s: %w", t.Addr, ctxErr(ctx, err))
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := conn.Write(req); err != nil {
		return fmt.Errorf("writing request: %w", ctxErr(ctx, err))
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 16<<10), nil)
	if err != nil {
		return fmt.Errorf("reading response head: %w", ctxErr(ctx, err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return fmt.Errorf("reading response body: %w", ctxErr(ctx, err))
	}
	return verify(resp.StatusCode, resp.Header.Get("Content-Encoding"), body, s.Calls[i].Response)
}

// verify checks a response against the generated one.
func verify(status int, encoding string, body, want []byte) error {
	switch {
	case status != http.StatusOK:
		return fmt.Errorf("%w: status %d (%d-byte body: %.160q)", ErrMismatch, status, len(body), body)
	case encoding != "":
		return fmt.Errorf("%w: Content-Encoding %q sent to a client that did not ask for it", ErrMismatch, encoding)
	case !bytes.Equal(body, want):
		return fmt.Errorf("%w: body differs from the generated response (%d bytes, want %d; first difference at byte %d)",
			ErrMismatch, len(body), len(want), firstDiff(body, want))
	}
	return nil
}

func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}

// appendRequest appends "POST path HTTP/1.0", the header fields in order, and the body.
func appendRequest(b []byte, path string, hdr [][2]string, body []byte) []byte {
	b = append(b, "POST "...)
	b = append(b, path...)
	b = append(b, " HTTP/1.0\r\n"...)
	for _, f := range hdr {
		b = append(b, f[0]...)
		b = append(b, ": "...)
		b = append(b, f[1]...)
		b = append(b, "\r\n"...)
	}
	b = append(b, "\r\n"...)
	return append(b, body...)
}
