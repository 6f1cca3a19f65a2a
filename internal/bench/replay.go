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
// "replay:", which the client reports as a mismatch (and Counts as bad: a one-way
// message refused here never reaches the client that sent it). A one-way scenario's
// calls are answered 202 Accepted with an empty body. While a run is tracked (Track),
// the server records when each of its calls arrived whole, and how many arrived again.
type ReplayServer struct {
	ln  net.Listener
	srv *http.Server

	mu        sync.RWMutex
	scenarios map[string]*Scenario
	tracked   map[string]*Arrivals // by scenario

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
	r := &ReplayServer{ln: ln, scenarios: map[string]*Scenario{}, tracked: map[string]*Arrivals{}, done: make(chan struct{})}
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
	s, i, err := r.lookup(req.Header.Get(CallHeader))
	if err != nil {
		fail("%v", err)
		return
	}
	c := s.Calls[i]
	body, err := io.ReadAll(io.LimitReader(req.Body, maxBody+1))
	if err != nil {
		fail("reading request body: %v", err)
		return
	}
	if !bytes.Equal(body, c.Request) {
		r.refused(s.Name)
		fail("request body differs from the generated request (%d bytes, want %d; first difference at byte %d)",
			len(body), len(c.Request), firstDiff(body, c.Request))
		return
	}
	r.arrived(s.Name, i, time.Now())
	if s.spec.OneWay {
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusAccepted)
		return
	}
	w.Header().Set("Content-Type", contentType(c.Response))
	w.Header().Set("Content-Length", strconv.Itoa(len(c.Response)))
	_, _ = w.Write(c.Response)
}

func (r *ReplayServer) lookup(key string) (*Scenario, int, error) {
	name, idx, ok := strings.Cut(key, "/")
	if !ok {
		return nil, 0, fmt.Errorf("header %s %q: want <scenario>/<index>", CallHeader, key)
	}
	i, err := strconv.Atoi(idx)
	if err != nil {
		return nil, 0, fmt.Errorf("header %s %q: bad index", CallHeader, key)
	}
	r.mu.RLock()
	s := r.scenarios[name]
	r.mu.RUnlock()
	if s == nil || i < 0 || i >= len(s.Calls) {
		return nil, 0, fmt.Errorf("header %s %q: no such exchange", CallHeader, key)
	}
	return s, i, nil
}

// Track starts recording the arrivals of calls first..first+n-1 of the scenario, for
// one run, replacing the scenario's earlier record: its calls arriving from then on
// count for this one (runs of a scenario follow each other).
func (r *ReplayServer) Track(scenario string, first, n int) *Arrivals {
	a := &Arrivals{first: first, at: make([]time.Time, n), changed: make(chan struct{})}
	r.mu.Lock()
	r.tracked[scenario] = a
	r.mu.Unlock()
	return a
}

// Untrack stops recording a's arrivals.
func (r *ReplayServer) Untrack(scenario string, a *Arrivals) {
	r.mu.Lock()
	if r.tracked[scenario] == a {
		delete(r.tracked, scenario)
	}
	r.mu.Unlock()
}

// refused notes a call of the scenario that the server refused: waiting for the run's
// calls to arrive ends (a one-way call refused here never arrives, and its client was
// answered already).
func (r *ReplayServer) refused(scenario string) {
	r.mu.RLock()
	a := r.tracked[scenario]
	r.mu.RUnlock()
	if a != nil {
		a.mu.Lock()
		a.refused++
		close(a.changed)
		a.changed = make(chan struct{})
		a.mu.Unlock()
	}
}

func (r *ReplayServer) arrived(scenario string, i int, t time.Time) {
	r.mu.RLock()
	a := r.tracked[scenario]
	r.mu.RUnlock()
	if a != nil {
		a.record(i, t)
	}
}

// Arrivals records when the replay server got each call of a run whole (checked byte
// for byte), and which calls it got more than once: a duplicate, which a one-way
// delivery must never make (nor any other call: the client never sends one twice).
type Arrivals struct {
	first int

	mu         sync.Mutex
	at         []time.Time // first arrival of call first+k; zero: not yet
	duplicates int
	firstDup   int           // the first call that arrived twice (valid when duplicates > 0)
	refused    int           // calls of the scenario the server refused
	changed    chan struct{} // closed and replaced on every arrival
}

func (a *Arrivals) record(i int, t time.Time) {
	k := i - a.first
	a.mu.Lock()
	defer a.mu.Unlock()
	if k < 0 || k >= len(a.at) {
		return
	}
	if !a.at[k].IsZero() {
		if a.duplicates == 0 {
			a.firstDup = i
		}
		a.duplicates++
		return
	}
	a.at[k] = t
	close(a.changed)
	a.changed = make(chan struct{})
}

// Wait waits until every call in calls has arrived, ctx ends, limit passes, or the
// server refuses a call of the scenario, and returns how many of them have not arrived.
func (a *Arrivals) Wait(ctx context.Context, calls []int, limit time.Duration) int {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		a.mu.Lock()
		missing := 0
		for _, i := range calls {
			if k := i - a.first; k < 0 || k >= len(a.at) || a.at[k].IsZero() {
				missing++
			}
		}
		changed, refused := a.changed, a.refused
		a.mu.Unlock()
		if missing == 0 || refused > 0 {
			return missing
		}
		select {
		case <-changed:
		case <-timer.C:
			return missing
		case <-ctx.Done():
			return missing
		}
	}
}

// After counts the calls from..to-1 that arrived after t.
func (a *Arrivals) After(from, to int, t time.Time) (n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := max(from, a.first); i < min(to, a.first+len(a.at)); i++ {
		if at := a.at[i-a.first]; at.After(t) {
			n++
		}
	}
	return n
}

// Received summarizes the calls from..to-1: how many arrived, when the last of them
// did, and the duplicates of the whole record (with the first call that came twice).
func (a *Arrivals) Received(from, to int) (n int, last time.Time, duplicates, firstDup int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := max(from, a.first); i < min(to, a.first+len(a.at)); i++ {
		if t := a.at[i-a.first]; !t.IsZero() {
			n++
			if t.After(last) {
				last = t
			}
		}
	}
	return n, last, a.duplicates, a.firstDup
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
	req := appendRequest(nil, "HTTP/1.0", s.spec.Path, s.requestHeaders(t.Host, i), s.Calls[i].Request)
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
	return verify(resp.StatusCode, s.spec.wantStatus(), resp.Header.Get("Content-Encoding"), body, s.Calls[i].Response)
}

// verify checks a response against the generated one: wantStatus (200, or 202 for a
// one-way call) and the body byte for byte (a one-way call's is empty).
func verify(status, wantStatus int, encoding string, body, want []byte) error {
	switch {
	case status != wantStatus:
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

// appendRequest appends "POST path <version>", the header fields in order, and the body.
func appendRequest(b []byte, version, path string, hdr [][2]string, body []byte) []byte {
	b = append(b, "POST "...)
	b = append(b, path...)
	b = append(b, ' ')
	b = append(b, version...)
	b = append(b, "\r\n"...)
	for _, f := range hdr {
		b = append(b, f[0]...)
		b = append(b, ": "...)
		b = append(b, f[1]...)
		b = append(b, "\r\n"...)
	}
	b = append(b, "\r\n"...)
	return append(b, body...)
}
