package tunnel

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

// TestStreamAfterSent: AfterSent's f runs once the message's last frame was flushed to
// the connection — not when CloseWrite returned, while it still waited in the queue —
// for identity and coded messages; a stream that fails runs it too; one registered late
// runs at once.
func TestStreamAfterSent(t *testing.T) {
	for _, coded := range []bool{false, true} {
		t.Run(map[bool]string{false: "identity", true: "coded"}[coded], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ccfg, scfg := &Config{KeepaliveInterval: 0}, &Config{KeepaliveInterval: 0}
				if coded {
					ccfg, scfg = codecConfig("edge", 0), codecConfig("origin", 0)
				}
				cc, sc := net.Pipe()
				gate := newGateConn(cc) // holds the edge's writes while paused
				c, s := sessionsOn(t, gate, sc, ccfg, scfg, NewMetrics(nil), NewMetrics(nil))
				var accepted = make(chan *Stream, 1)
				go func() {
					st, err := s.AcceptStream(context.Background())
					if err == nil {
						accepted <- st
					}
				}()

				st, err := c.OpenStream(context.Background())
				require.NoError(t, err)
				sent := 0
				st.AfterSent(func() { sent++ })
				_, err = st.Write([]byte("<request/>"))
				require.NoError(t, err)
				// The connection takes nothing: the last frame waits in the writer.
				gate.pause()
				done := make(chan error, 1)
				go func() { done <- st.CloseWrite() }()
				synctest.Wait()
				require.Positive(t, gate.blocked.Load(), "the writer waits on the connection")
				require.Zero(t, sent, "not on the wire yet")
				gate.resume()

				peer := <-accepted
				got, err := io.ReadAll(peer)
				require.NoError(t, err)
				require.Equal(t, "<request/>", string(got))
				require.NoError(t, <-done)
				synctest.Wait()
				require.Equal(t, 1, sent, "once the last frame was flushed")

				late := 0
				st.AfterSent(func() { late++ })
				require.Equal(t, 1, late, "registered after the fact: at once")

				// A stream that fails before its message ends: f runs too.
				st2, err := c.OpenStream(context.Background())
				require.NoError(t, err)
				failed := 0
				st2.AfterSent(func() { failed++ })
				_, _ = st2.Write([]byte("<cut"))
				st2.Reset(frame.CodeCancel, "gave up")
				require.Equal(t, 1, failed)

				_ = peer.Close()
				_ = st.Close()
			})
		})
	}
}

// TestServerForgetsStreamBeforeItsEndLeaves: at its stream limit, a server must have
// forgotten an exchange by the time the peer holds its last frame, because the peer opens
// its next stream at once. Sequential exchanges against MaxStreams 1: none is refused.
// (With the end written before the stream was forgotten, the next START could arrive
// first and be refused: seen as 503 origin_unreachable on a busy machine.)
func TestServerForgetsStreamBeforeItsEndLeaves(t *testing.T) {
	scfg := &Config{KeepaliveInterval: 0, MaxStreams: 1}
	c, s := sessionPair(t, tcpPair, &Config{KeepaliveInterval: 0}, scfg)
	echoServer(t, s)
	for i := range 500 {
		st, err := c.OpenStream(context.Background())
		if errors.Is(err, ErrStreamLimit) { // the client's own view lags: wait for it
			require.Eventually(t, func() bool { st, err = c.OpenStream(context.Background()); return err == nil }, 5*time.Second, 100*time.Microsecond)
		}
		require.NoError(t, err)
		got, err := exchangeOn(st, []byte("x"))
		require.NoError(t, err, "exchange %d", i)
		require.Equal(t, "re:x", string(got))
	}
}
