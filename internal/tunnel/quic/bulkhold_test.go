package quic

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	quicgo "github.com/quic-go/quic-go"
	"github.com/stretchr/testify/require"
)

// recordingStream is a streamIO that records when each message was written whole and
// closed, on a shared log (fake time in a synctest bubble).
type recordingStream struct {
	streamIO // unused methods panic
	log      *writeLog
	name     string
	fail     error
}

type writeLog struct {
	mu      sync.Mutex
	entries []loggedWrite
}

type loggedWrite struct {
	name string
	at   time.Time
}

func (r *recordingStream) Write(p []byte) (int, error) {
	if r.fail != nil {
		return 0, r.fail
	}
	return len(p), nil
}

func (r *recordingStream) Close() error {
	r.log.mu.Lock()
	r.log.entries = append(r.log.entries, loggedWrite{r.name, time.Now()})
	r.log.mu.Unlock()
	return nil
}

func (r *recordingStream) StreamID() quicgo.StreamID { return 0 }

// TestUDPBulkGate: bulk messages joining a batch within bulkDelay of its first one are
// written together when it ends, in the order they came, each told its own outcome; a
// batch that reaches bulkHoldMax is written at once; the next message opens a new batch.
func TestUDPBulkGate(t *testing.T) {
	t.Run("within the delay", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var g bulkGate
			log := &writeLog{}
			start := time.Now()
			errs := make(chan error, 4)
			for i, name := range []string{"a", "b", "c", "late"} {
				st := &recordingStream{log: log, name: name}
				if name == "b" {
					st.fail = errors.New("stream reset")
				}
				go func() { errs <- g.write(st, []byte(name)) }()
				if i < 2 {
					time.Sleep(2 * time.Millisecond) // a at 0, b at 2, c at 4 ms
				} else {
					time.Sleep(bulkDelay) // late at 4+5 ms: after the first batch went
				}
			}
			time.Sleep(2 * bulkDelay)
			synctest.Wait()
			var failed int
			for range 4 {
				if err := <-errs; err != nil {
					failed++
				}
			}
			require.Equal(t, 1, failed, "b's reset is b's alone")
			require.Equal(t, []loggedWrite{
				{"a", start.Add(bulkDelay)},
				{"c", start.Add(bulkDelay)},
				{"late", start.Add(4*time.Millisecond + bulkDelay + bulkDelay)},
			}, log.entries)
		})
	})
	t.Run("full batch", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var g bulkGate
			log := &writeLog{}
			start := time.Now()
			var wg sync.WaitGroup
			for i := range bulkHoldMax {
				st := &recordingStream{log: log, name: string(rune('A' + i%26))}
				wg.Go(func() { require.NoError(t, g.write(st, []byte("m"))) })
				synctest.Wait() // each joins in turn
			}
			wg.Wait()
			require.Len(t, log.entries, bulkHoldMax)
			for _, e := range log.entries {
				require.Equal(t, start, e.at, "written when the batch filled, not after the delay")
			}
		})
	})
}
