package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Client kinds: how the bench client talks to the configuration in front of it.
const (
	// ClientHTTP10 is the legacy stack of the papers: HTTP/1.0, a TCP connection per
	// call (CallOnce).
	ClientHTTP10 = "http10"
	// ClientHTTP11 is a keep-alive stack (Axis2, .NET, zeep with a session): HTTP/1.1,
	// each concurrent client keeps its connection from call to call.
	ClientHTTP11 = "http11"
)

// ClientKinds lists the client kinds.
var ClientKinds = []string{ClientHTTP10, ClientHTTP11}

// keepAliveClient makes HTTP/1.1 calls over persistent connections: a call takes an
// idle connection (or dials one) and gives it back when the response has been read to
// its end and the server did not ask to close. With c callers at once it holds at most
// c connections.
type keepAliveClient struct {
	target Target
	s      *Scenario

	mu   sync.Mutex
	idle []*keepAliveConn
}

type keepAliveConn struct {
	conn net.Conn
	r    *bufio.Reader
	req  []byte // reused request buffer
}

func newKeepAliveClient(t Target, s *Scenario) *keepAliveClient {
	return &keepAliveClient{target: t, s: s}
}

// Call makes exchange i and verifies the response as CallOnce does.
func (k *keepAliveClient) Call(ctx context.Context, i int) error {
	kc, err := k.get(ctx)
	if err != nil {
		return err
	}
	reusable := false
	defer func() {
		if reusable {
			k.put(kc)
		} else {
			_ = kc.conn.Close()
		}
	}()
	stop := context.AfterFunc(ctx, func() { _ = kc.conn.SetDeadline(time.Unix(1, 0)) })
	kc.req = appendRequest(kc.req[:0], "HTTP/1.1", k.s.spec.Path, k.s.requestHeaders(k.target.Host, i), k.s.Calls[i].Request)
	if _, err := kc.conn.Write(kc.req); err != nil {
		stop()
		return fmt.Errorf("writing request: %w", ctxErr(ctx, err))
	}
	resp, err := http.ReadResponse(kc.r, nil)
	if err != nil {
		stop()
		return fmt.Errorf("reading response head: %w", ctxErr(ctx, err))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	_ = resp.Body.Close()
	// The connection goes back only if the deadline was never touched (stop reports
	// that the AfterFunc had not run) and the response ended where the server said.
	notCut := stop()
	if err != nil {
		return fmt.Errorf("reading response body: %w", ctxErr(ctx, err))
	}
	reusable = notCut && !resp.Close && len(body) <= maxBody
	return verify(resp.StatusCode, k.s.spec.wantStatus(), resp.Header.Get("Content-Encoding"), body, k.s.Calls[i].Response)
}

func (k *keepAliveClient) get(ctx context.Context) (*keepAliveConn, error) {
	k.mu.Lock()
	if n := len(k.idle); n > 0 {
		kc := k.idle[n-1]
		k.idle = k.idle[:n-1]
		k.mu.Unlock()
		return kc, nil
	}
	k.mu.Unlock()
	conn, err := k.target.Site.DialContext(ctx, "tcp", k.target.Addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", k.target.Addr, ctxErr(ctx, err))
	}
	return &keepAliveConn{conn: conn, r: bufio.NewReaderSize(conn, 16<<10)}, nil
}

func (k *keepAliveClient) put(kc *keepAliveConn) {
	k.mu.Lock()
	k.idle = append(k.idle, kc)
	k.mu.Unlock()
}

// Close closes the idle connections.
func (k *keepAliveClient) Close() {
	k.mu.Lock()
	idle := k.idle
	k.idle = nil
	k.mu.Unlock()
	for _, kc := range idle {
		_ = kc.conn.Close()
	}
}
