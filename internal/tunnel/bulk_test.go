package tunnel

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBulkFramesShareAFlush: messages of bulk streams (SetBulk) queued while the
// connection carries bulkHoldStreams exchanges or more are held up to BulkDelay and
// reach the peer together; the first ones, on a connection not busy yet, go at once; a
// message someone waits on ends the hold and goes at once with everything held; with
// BulkDelay negative nothing is held. Fake time (synctest) makes arrival times exact.
func TestBulkFramesShareAFlush(t *testing.T) {
	const delay = 5 * time.Millisecond
	for _, tc := range []struct {
		name      string
		bulkDelay time.Duration
		urgentAt  int // index of a message sent without SetBulk (-1: none)
	}{
		{"held", delay, -1},
		{"urgent ends the hold", delay, bulkHoldStreams + 1},
		{"off", -1, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cc, sc := net.Pipe()
				cfg := &Config{KeepaliveInterval: 0, BulkDelay: tc.bulkDelay}
				c, s := sessionsOn(t, cc, sc, cfg, &Config{KeepaliveInterval: 0}, NewMetrics(nil), NewMetrics(nil))

				type arrival struct {
					msg string
					at  time.Duration
				}
				start := time.Now()
				arrived := make(chan arrival, 32)
				serveEach(s, func(st *Stream) {
					if b, err := io.ReadAll(st); err == nil {
						arrived <- arrival{string(b), time.Since(start)}
					}
				})

				// One message a millisecond, each on its own stream, none answered: the
				// streams stay open, so the connection gets busier with each.
				const n = bulkHoldStreams + 3
				var streams []*Stream
				for i := range n {
					st, err := c.OpenStream(context.Background())
					require.NoError(t, err)
					streams = append(streams, st)
					if i != tc.urgentAt {
						st.SetBulk()
					}
					_, err = fmt.Fprintf(st, "<m%d/>", i)
					require.NoError(t, err)
					require.NoError(t, st.CloseWrite())
					time.Sleep(time.Millisecond)
				}
				time.Sleep(2 * delay)
				synctest.Wait()
				close(arrived)
				at := map[string]time.Duration{}
				for a := range arrived {
					at[a.msg] = a.at
				}
				require.Len(t, at, n)

				for i := range n {
					sentAt := time.Duration(i) * time.Millisecond
					got := at[fmt.Sprintf("<m%d/>", i)]
					switch {
					case tc.bulkDelay < 0 || i < bulkHoldStreams-1:
						// Off, or fewer than bulkHoldStreams exchanges on the connection.
						require.Equal(t, sentAt, got, "message %d goes at once", i)
					case tc.urgentAt < 0:
						// The first held message opens the hold; the later ones join it.
						require.Equal(t, time.Duration(bulkHoldStreams-1)*time.Millisecond+delay, got,
							"message %d waits for the held flush", i)
					default:
						urgentAt := time.Duration(tc.urgentAt) * time.Millisecond
						if i <= tc.urgentAt {
							require.Equal(t, urgentAt, got, "message %d leaves with the urgent one", i)
						} else {
							require.Equal(t, sentAt+delay, got, "message %d opens a new hold", i)
						}
					}
				}
				c.mu.Lock()
				require.Zero(t, c.ringBulk, "the ring's counts follow its streams")
				require.Zero(t, c.ringUrgent)
				c.mu.Unlock()
				for _, st := range streams {
					_ = st.Close()
				}
			})
		})
	}
}
