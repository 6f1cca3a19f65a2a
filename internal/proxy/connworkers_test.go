package proxy

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEdgeConnWorkers: client connections are served by workers that take the next
// connection when theirs ends. Sequential connections (an HTTP/1.0 client's one per call)
// share a few goroutines; after a burst at most maxIdleConnWorkers wait, the rest end;
// Shutdown ends those waiting (goleak checks the package).
func TestEdgeConnWorkers(t *testing.T) {
	up := newUpstream(t, okResponse("<ok/>"))
	env := newEnv(t, envConfig{Upstreams: []Upstream{{Name: "up", Address: up.addr()}}})
	edge := env.edge
	stop := make(chan struct{})
	drained := make(chan struct{})
	go func() { // more calls than up.got holds
		defer close(drained)
		for {
			select {
			case <-up.got:
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-drained })
	call := func(cl *client, keepAlive bool) {
		t.Helper()
		extra := ""
		if keepAlive {
			extra = "Connection: keep-alive\r\n"
		}
		cl.send("POST /svc HTTP/1.0\r\nHost: svc.example\r\n" + extra + "Content-Length: 3\r\n\r\nabc")
		resp, body := cl.read("POST")
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, "<ok/>", string(body))
	}

	t.Run("sequential connections share workers", func(t *testing.T) {
		const conns = 100
		before := edge.startedConnWorkers.Load()
		for range conns {
			cl := env.dial()
			call(cl, false)
			cl.requireClosed() // the edge ended the connection: its worker is free soon
		}
		started := edge.startedConnWorkers.Load() - before
		require.Less(t, started, int64(conns/2), "%d sequential connections, workers started", conns)
	})

	t.Run("a burst leaves at most maxIdleConnWorkers waiting", func(t *testing.T) {
		const conns = maxIdleConnWorkers + 16
		clients := make([]*client, conns)
		for i := range clients {
			clients[i] = env.dial()
			call(clients[i], true) // each connection stays open, held by its worker
		}
		require.GreaterOrEqual(t, edge.startedConnWorkers.Load(), int64(conns), "a worker per open connection")
		var wg sync.WaitGroup
		for _, cl := range clients {
			wg.Go(func() { _ = cl.c.Close() })
		}
		wg.Wait()
		require.Eventually(t, func() bool {
			edge.mu.Lock()
			defer edge.mu.Unlock()
			return len(edge.conns) == 0
		}, testDeadline, time.Millisecond, "connections forgotten")
		require.LessOrEqual(t, edge.idleWorkers.Load(), int32(maxIdleConnWorkers))
		require.Eventually(t, func() bool { return edge.idleWorkers.Load() == maxIdleConnWorkers },
			testDeadline, time.Millisecond, "idle workers: "+strconv.Itoa(int(edge.idleWorkers.Load())))

		// The next connections are served by those waiting.
		before := edge.startedConnWorkers.Load()
		for range 10 {
			cl := env.dial()
			call(cl, false)
			cl.requireClosed()
		}
		require.Zero(t, edge.startedConnWorkers.Load()-before, "workers started with %d waiting", maxIdleConnWorkers)
	})
}
