package bench

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// dialCounter is the client site, counting the connections it opens.
type dialCounter struct {
	loopbackSite
	dials atomic.Int32
}

func (d *dialCounter) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.dials.Add(1)
	return d.loopbackSite.DialContext(ctx, network, addr)
}

// TestKeepAliveClientReusesConnections: the HTTP/1.1 client keeps one connection per
// concurrent caller from call to call, checks every response byte for byte, and does
// not put back a connection the server closes.
func TestKeepAliveClientReusesConnections(t *testing.T) {
	srv, sc := startReplay(t, "stress")
	s := sc["stress"]
	site := &dialCounter{loopbackSite: loopbackSite{"client"}}
	k := newKeepAliveClient(Target{Site: site, Addr: srv.Addr().String(), Host: srv.Addr().String()}, s)
	defer k.Close()
	for i := range 12 {
		require.NoError(t, k.Call(callCtx(t), i%len(s.Calls)), "call %d", i)
	}
	require.Equal(t, int32(1), site.dials.Load(), "one caller, one connection")

	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for i := range 10 {
				require.NoError(t, k.Call(callCtx(t), i%len(s.Calls)))
			}
		})
	}
	wg.Wait()
	require.LessOrEqual(t, site.dials.Load(), int32(4), "at most one connection per caller at once")

	// A response with Connection: close: that connection is not put back.
	k.Close()
	srv.srv.SetKeepAlivesEnabled(false)
	before := site.dials.Load()
	require.NoError(t, k.Call(callCtx(t), 0))
	require.NoError(t, k.Call(callCtx(t), 1))
	require.Equal(t, before+2, site.dials.Load(), "a connection answered with Connection: close is not reused")
	require.Empty(t, k.idle)
}

// TestKeepAliveClientRequest: the request is HTTP/1.1 with the scenario's headers.
func TestKeepAliveClientRequest(t *testing.T) {
	_, sc := startReplay(t, "stress")
	s := sc["stress"]
	req := appendRequest(nil, "HTTP/1.1", s.spec.Path, s.requestHeaders("h", 2), s.Calls[2].Request)
	r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(req)))
	require.NoError(t, err)
	require.Equal(t, "HTTP/1.1", r.Proto)
	require.Equal(t, "h", r.Host)
	require.EqualValues(t, len(s.Calls[2].Request), r.ContentLength)
	require.Equal(t, "stress/2", r.Header.Get(CallHeader))
}
