package tunnel

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/testutil"
)

// TestFinishedExchangesHoldNoMemory: exchanges that set deadlines, as the proxy does, leave
// nothing behind once they are over. Each used to keep two armed 60 s deadline timers
// (about 1.1 KB per exchange, 264 MB after 200,000 exchanges).
func TestFinishedExchangesHoldNoMemory(t *testing.T) {
	cc, sc := net.Pipe()
	ch := make(chan *Session, 1)
	go func() {
		s, err := ServerSession(context.Background(), sc, &Config{KeepaliveInterval: 0}, nil)
		require.NoError(t, err)
		ch <- s
	}()
	c, err := ClientSession(context.Background(), cc, &Config{KeepaliveInterval: 0}, nil, "mem")
	require.NoError(t, err)
	s := <-ch
	defer c.Close()
	defer s.Close()
	go func() {
		for {
			st, err := s.AcceptStream(context.Background())
			if err != nil {
				return
			}
			_ = st.SetDeadline(time.Now().Add(time.Minute))
			req, _ := io.ReadAll(st)
			_, _ = st.Write(req)
			_ = st.CloseWrite()
			_ = st.Close()
		}
	}()
	msg := make([]byte, 256)
	exchange := func() {
		st, err := c.OpenStream(context.Background())
		require.NoError(t, err)
		_ = st.SetDeadline(time.Now().Add(time.Minute))
		_, err = st.Write(msg)
		require.NoError(t, err)
		require.NoError(t, st.CloseWrite())
		_, err = io.ReadAll(st)
		require.NoError(t, err)
		require.NoError(t, st.Close())
	}
	heap := testutil.HeapAlloc
	for range 200 { // warm up pools and maps
		exchange()
	}
	before := heap()
	const n = 5000
	for range n {
		exchange()
	}
	grown := int64(heap()) - int64(before)
	t.Logf("heap grew %d bytes over %d exchanges (%.1f B each)", grown, n, float64(grown)/n)
	require.Less(t, grown, int64(n*100), "finished exchanges keep memory (armed timers?)")
}
