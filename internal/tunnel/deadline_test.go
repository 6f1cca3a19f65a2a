package tunnel

import (
	"context"
	"errors"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStreamDeadlines: a blocked Read or Write returns ErrTimeout when its deadline
// passes, whether the deadline was set before it blocked or while it waits; a deadline
// moved later, or cleared, lets it wait on; a stream that timed out works again with a
// new deadline. (Deadlines signal the stream's own wait channels: none of this may hang.) Each case
// runs in a synctest bubble, so no sleep decides whether an operation was blocked.
func TestStreamDeadlines(t *testing.T) {
	const window = 64 << 10
	type op int
	const (
		read op = iota
		write
	)
	cases := []struct {
		name string
		op   op
		// arrange runs while the operation is blocked (or before it, with before).
		before func(st *Stream)
		during func(st *Stream)
		// timeout: the operation must end with ErrTimeout; else it must still wait.
		timeout bool
	}{
		{name: "read, deadline set before", op: read,
			before: func(st *Stream) { _ = st.SetReadDeadline(time.Now().Add(20 * time.Millisecond)) }, timeout: true},
		{name: "read, past deadline set while blocked", op: read,
			during: func(st *Stream) { _ = st.SetDeadline(time.Unix(1, 0)) }, timeout: true},
		{name: "read, deadline moved later while blocked", op: read,
			before: func(st *Stream) { _ = st.SetReadDeadline(time.Now().Add(50 * time.Millisecond)) },
			during: func(st *Stream) { _ = st.SetReadDeadline(time.Now().Add(time.Hour)) }},
		{name: "read, deadline cleared while blocked", op: read,
			before: func(st *Stream) { _ = st.SetReadDeadline(time.Now().Add(50 * time.Millisecond)) },
			during: func(st *Stream) { _ = st.SetReadDeadline(time.Time{}) }},
		{name: "read, write deadline does not bound it", op: read,
			before: func(st *Stream) { _ = st.SetWriteDeadline(time.Unix(1, 0)) }},
		{name: "write, deadline set before", op: write,
			before: func(st *Stream) { _ = st.SetWriteDeadline(time.Now().Add(20 * time.Millisecond)) }, timeout: true},
		{name: "write, past deadline set while blocked", op: write,
			during: func(st *Stream) { _ = st.SetDeadline(time.Unix(1, 0)) }, timeout: true},
		{name: "write, deadline cleared while blocked", op: write,
			before: func(st *Stream) { _ = st.SetWriteDeadline(time.Now().Add(50 * time.Millisecond)) },
			during: func(st *Stream) { _ = st.SetWriteDeadline(time.Time{}) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// In a bubble over a pipe: "blocked" and "still waiting" are facts
			// (synctest.Wait), and the deadlines' timers run on the bubble's clock.
			synctest.Test(t, func(t *testing.T) {
				// No keepalive: its timers would keep the bubble's clock running forever
				// if a deadline failed to fire, instead of the bubble reporting a deadlock.
				pipe := func(*testing.T) (net.Conn, net.Conn) { return net.Pipe() }
				c, s := sessionPair(t, pipe, &Config{}, &Config{StreamWindow: window})
				st, err := c.OpenStream(context.Background())
				require.NoError(t, err)
				if tc.op == read {
					require.NoError(t, st.CloseWrite()) // nobody answers: Read waits
				}
				if tc.before != nil {
					tc.before(st)
				}
				done := make(chan error, 1)
				var got []byte
				go func() {
					if tc.op == read {
						b := make([]byte, 16)
						n, err := st.Read(b)
						got = b[:n]
						done <- err
						return
					}
					_, err := st.Write(make([]byte, 4*window)) // nobody reads: Write waits for credit
					done <- err
				}()
				if tc.during != nil {
					synctest.Wait() // blocked (or already returned: the assertions below say which)
					tc.during(st)
				}
				if tc.timeout {
					err := <-done // a deadline that never fires leaves the bubble deadlocked: the test fails
					require.ErrorIs(t, err, ErrTimeout)
					var ne interface{ Timeout() bool }
					require.True(t, errors.As(err, &ne) && ne.Timeout())
				} else {
					time.Sleep(time.Second) // past every deadline the case set
					synctest.Wait()
					select {
					case err := <-done:
						t.Fatalf("the operation returned (%v) though no deadline bounds it", err)
					default:
					}
				}
				if tc.op == write {
					_ = st.Close() // unblocks a write still waiting
					return
				}
				// The stream works again after a timeout, and a Read that still waits gets
				// the peer's answer.
				require.NoError(t, st.SetReadDeadline(time.Now().Add(5*time.Second)))
				sst, err := s.AcceptStream(context.Background())
				require.NoError(t, err)
				_, err = sst.Write([]byte("answer"))
				require.NoError(t, err)
				require.NoError(t, sst.CloseWrite())
				if tc.timeout {
					b := make([]byte, 16)
					n, err := st.Read(b)
					require.NoError(t, err)
					got = b[:n]
				} else {
					require.NoError(t, <-done)
				}
				require.Equal(t, "answer", string(got))
			})
		})
	}
}
