package groupcommit

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

var bucket = []byte("b")

func openDB(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "gc.db"), 0o600, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket(bucket)
		return err
	}))
	return db
}

func newCommitter(t *testing.T) (*bolt.DB, *Committer) {
	t.Helper()
	db := openDB(t)
	c := New(db)
	t.Cleanup(c.Close) // runs before the db's Close (cleanups run last in, first out)
	return db, c
}

func put(k, v string) func(*bolt.Tx) error {
	return func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put([]byte(k), []byte(v)) }
}

func get(t *testing.T, db *bolt.DB, k string) (string, bool) {
	t.Helper()
	var v []byte
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		v = tx.Bucket(bucket).Get([]byte(k))
		if v != nil {
			v = append([]byte(nil), v...)
		}
		return nil
	}))
	return string(v), v != nil
}

// blockLoop queues an update that holds the commit loop (inside its write transaction)
// until release is called, so the updates queued meanwhile go into one group. release
// returns once the blocking update is committed.
func blockLoop(t *testing.T, c *Committer) (release func()) {
	t.Helper()
	entered, unblock, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- c.Do(func(tx *bolt.Tx) error {
			close(entered)
			<-unblock
			return tx.Bucket(bucket).Put([]byte("blocker"), []byte("1"))
		})
	}()
	<-entered
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(unblock) }) }) // a test that failed first
	return func() {
		once.Do(func() { close(unblock) })
		require.NoError(t, <-done)
	}
}

// waitQueued waits until n updates wait in the queue (the loop is held by blockLoop, so
// nothing takes them out).
func waitQueued(t *testing.T, c *Committer, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(c.queue) < n {
		require.True(t, time.Now().Before(deadline), "%d updates queued, want %d", len(c.queue), n)
		runtime.Gosched()
	}
}

func TestLoneDo(t *testing.T) {
	db, c := newCommitter(t)
	require.NoError(t, c.Do(put("k", "v")))
	v, ok := get(t, db, "k")
	require.True(t, ok)
	require.Equal(t, "v", v)
}

func TestConcurrentDo(t *testing.T) {
	db, c := newCommitter(t)
	const goroutines, each = 64, 20
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*each)
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				errs <- c.Do(put(fmt.Sprintf("%d-%d", g, i), fmt.Sprint(g*each+i)))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		require.Equal(t, goroutines*each, tx.Bucket(bucket).Stats().KeyN)
		return nil
	}))
	for g := range goroutines {
		for i := range each {
			v, ok := get(t, db, fmt.Sprintf("%d-%d", g, i))
			require.True(t, ok)
			require.Equal(t, fmt.Sprint(g*each+i), v)
		}
	}
}

// More updates than one group holds (and than the queue holds) all commit.
func TestMoreThanOneGroup(t *testing.T) {
	db, c := newCommitter(t)
	release := blockLoop(t, c)
	const n = maxGroup + 100
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = c.Do(put(fmt.Sprint(i), "x")) })
	}
	waitQueued(t, c, maxGroup) // the queue is full; the rest wait to send
	release()
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i], "update %d", i)
		_, ok := get(t, db, fmt.Sprint(i))
		require.True(t, ok, "update %d", i)
	}
}

// A failing update is answered with its own error and its writes never land; the others
// of its group commit together (in one transaction).
func TestFailingUpdateInGroup(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail []int // which of the group's updates fail
	}{
		{"first", []int{0}},
		{"middle", []int{4}},
		{"last", []int{9}},
		{"several", []int{1, 2, 7}},
		{"all", []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, c := newCommitter(t)
			const n = 10
			fails := map[int]bool{}
			for _, i := range tc.fail {
				fails[i] = true
			}
			release := blockLoop(t, c)
			errs := make([]chan error, n)
			var mu sync.Mutex
			txOf := map[int]int{} // the transaction each update last ran in
			for i := range n {
				errs[i] = make(chan error, 1)
				myErr := fmt.Errorf("update %d fails", i)
				go func() {
					errs[i] <- c.Do(func(tx *bolt.Tx) error {
						mu.Lock()
						txOf[i] = tx.ID()
						mu.Unlock()
						// Write before failing: the write must be discarded.
						if err := tx.Bucket(bucket).Put(fmt.Appendf(nil, "k%d", i), []byte("v")); err != nil {
							return err
						}
						if fails[i] {
							return myErr
						}
						return nil
					})
				}()
				waitQueued(t, c, i+1) // queued in order
			}
			release()
			var okTx []int
			for i := range n {
				err := <-errs[i]
				_, landed := get(t, db, fmt.Sprintf("k%d", i))
				if fails[i] {
					require.EqualError(t, err, fmt.Sprintf("update %d fails", i))
					require.False(t, landed, "update %d failed but its write landed", i)
				} else {
					require.NoError(t, err)
					require.True(t, landed, "update %d", i)
					okTx = append(okTx, txOf[i])
				}
			}
			for _, id := range okTx {
				require.Equal(t, okTx[0], id, "the group's updates committed in one transaction")
			}
		})
	}
}

// A failing update answered alone: a later update is not affected.
func TestFailingLoneUpdate(t *testing.T) {
	db, c := newCommitter(t)
	boom := errors.New("boom")
	require.ErrorIs(t, c.Do(func(tx *bolt.Tx) error {
		require.NoError(t, tx.Bucket(bucket).Put([]byte("a"), []byte("1")))
		return boom
	}), boom)
	require.NoError(t, c.Do(put("b", "2")))
	_, ok := get(t, db, "a")
	require.False(t, ok)
	_, ok = get(t, db, "b")
	require.True(t, ok)
}

func TestDoAfterClose(t *testing.T) {
	db, c := newCommitter(t)
	require.NoError(t, c.Do(put("a", "1")))
	c.Close()
	c.Close() // idempotent
	for i := range 1000 {
		require.ErrorIs(t, c.Do(put(fmt.Sprint(i), "x")), ErrClosed)
	}
	_, ok := get(t, db, "0")
	require.False(t, ok)
}

// Close commits the updates already queued before it stops.
func TestCloseCommitsQueued(t *testing.T) {
	db, c := newCommitter(t)
	release := blockLoop(t, c)
	const n = 20
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- c.Do(put(fmt.Sprint(i), "x")) }()
	}
	waitQueued(t, c, n)
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	<-c.done // Close has begun
	require.ErrorIs(t, c.Do(put("late", "x")), ErrClosed)
	release()
	<-closed
	for i := range n {
		require.NoError(t, <-errs)
		_, ok := get(t, db, fmt.Sprint(i))
		require.True(t, ok, "update %d", i)
	}
	_, ok := get(t, db, "late")
	require.False(t, ok)
}

// Updates racing with Close either commit or fail with ErrClosed; none hangs.
func TestDoRacingClose(t *testing.T) {
	for range 20 {
		db, c := newCommitter(t)
		const goroutines = 16
		var wg sync.WaitGroup
		start := make(chan struct{})
		var mu sync.Mutex
		var committed []string
		for g := range goroutines {
			wg.Go(func() {
				<-start
				for i := 0; ; i++ {
					k := fmt.Sprintf("%d-%d", g, i)
					err := c.Do(put(k, "x"))
					if errors.Is(err, ErrClosed) || !assert.NoError(t, err) {
						return
					}
					mu.Lock()
					committed = append(committed, k)
					mu.Unlock()
				}
			})
		}
		close(start)
		c.Close()
		wg.Wait()
		for _, k := range committed {
			_, ok := get(t, db, k)
			require.True(t, ok, k)
		}
	}
}
