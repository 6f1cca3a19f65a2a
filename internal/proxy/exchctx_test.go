package proxy

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
)

// connLost is a parent's cause that says its connection was lost (as the tunnel server's).
type connLost struct{}

func (connLost) Error() string        { return "connection lost" }
func (connLost) ConnectionLost() bool { return true }

// TestExchangeCtx: an exchange context ends once, with the first cause; its hooks run once
// after it ended (one stopped first never does; one registered after runs at once); a
// context derived from it ends with it; its parent ends it, except with a lost
// connection when it outlives that. (Fake time: synctest.Wait lets hooks' goroutines run.)
func TestExchangeCtx(t *testing.T) {
	errFirst, errSecond := errors.New("first"), errors.New("second")
	synctest.Test(t, func(t *testing.T) {
		x := watchParent(context.Background()).newExchange(false)
		require.NoError(t, x.Err())
		require.Nil(t, causeOf(x))
		var ran, stopped atomic.Int32
		stopKept := x.AfterFunc(func() { stopped.Add(1) })
		x.AfterFunc(func() { ran.Add(1) })
		child, cancelChild := context.WithCancel(x)
		defer cancelChild()
		require.True(t, stopKept(), "stopped before the end")
		done := x.Done()

		x.end(errFirst)
		x.end(errSecond)
		synctest.Wait()
		require.Equal(t, int32(1), ran.Load())
		require.Zero(t, stopped.Load())
		require.ErrorIs(t, causeOf(x), errFirst)
		require.ErrorIs(t, x.Err(), context.Canceled)
		require.ErrorIs(t, context.Cause(x), context.Canceled, "context.Cause gives Err")
		<-done
		<-x.Done()
		<-child.Done()
		require.ErrorIs(t, child.Err(), context.Canceled)

		late := x.AfterFunc(func() { ran.Add(1) })
		synctest.Wait()
		require.Equal(t, int32(2), ran.Load(), "a hook registered after the end runs at once")
		require.False(t, late())
	})

	for _, c := range []struct {
		name    string
		outlive bool
		cause   error
		ends    bool
	}{
		{"connection lost ends an exchange tied to it", false, connLost{}, true},
		{"connection lost leaves one that outlives it", true, connLost{}, false},
		{"shutdown ends one that outlives its connection", true, errSecond, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				parent, cancel := context.WithCancelCause(context.Background())
				x := watchParent(parent).newExchange(c.outlive)
				cancel(c.cause)
				synctest.Wait()
				if !c.ends {
					require.NoError(t, x.Err())
					x.end(nil) // the exchange is over
					require.ErrorIs(t, causeOf(x), context.Canceled)
					return
				}
				require.ErrorIs(t, causeOf(x), c.cause)
			})
		})
	}

	t.Run("a parent that ended already", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			parent, cancel := context.WithCancelCause(context.Background())
			cancel(errFirst)
			x := watchParent(parent).newExchange(false)
			synctest.Wait()
			require.ErrorIs(t, causeOf(x), errFirst)
		})
	})
}

// TestHookOnce: a hook registered with hookOnce runs once when the exchange ends unless
// stopped first (stop reports that it kept it from running, once); registered after the
// end it runs at once and stop reports false.
func TestHookOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := watchParent(context.Background())
		var ran atomic.Int32
		x := w.newExchange(false)
		kept, run := x.hookOnce(func() { ran.Add(1) }), x.hookOnce(func() { ran.Add(10) })
		require.True(t, kept.stop())
		require.False(t, kept.stop(), "a second stop keeps nothing more")
		x.end(nil)
		synctest.Wait()
		require.Equal(t, int32(10), ran.Load())
		require.False(t, run.stop(), "it ran")

		late := x.hookOnce(func() { ran.Add(100) })
		synctest.Wait()
		require.Equal(t, int32(110), ran.Load(), "registered after the end: runs at once")
		require.False(t, late.stop())
	})
}

// An exchange that ends normally allocates no more than its context and the stop
// functions of its hooks: its parent is watched once for all.
func TestExchangeCtxAllocs(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := watchParent(parent)
	allocs := testing.AllocsPerRun(100, func() {
		x := w.newExchange(true)
		stop := x.AfterFunc(func() {})
		stop()
		x.end(nil)
	})
	t.Logf("%.0f allocations", allocs)
	require.LessOrEqual(t, allocs, 2.0)
}

// TestParentWatch: a parent's end ends every exchange still running under it, with its
// cause, whatever order the others ended in before (the watch list stays whole as
// exchanges leave it from its head, middle and tail), and no exchange that ended before;
// an exchange made after the parent ended ends at once.
func TestParentWatch(t *testing.T) {
	errShutdown, errOver := errors.New("shutdown"), errors.New("over")
	for _, ended := range [][]int{nil, {0}, {9}, {4}, {0, 9, 4, 5, 1}, {1, 3, 5, 7, 9}} {
		synctest.Test(t, func(t *testing.T) {
			parent, cancel := context.WithCancelCause(context.Background())
			w := watchParent(parent)
			xs := make([]*exchangeCtx, 10)
			for i := range xs {
				xs[i] = w.newExchange(i%2 == 0) // outliving a lost connection changes nothing here
			}
			for _, i := range ended {
				xs[i].end(errOver)
			}
			cancel(errShutdown)
			synctest.Wait()
			for i, x := range xs {
				if slices.Contains(ended, i) {
					require.ErrorIs(t, causeOf(x), errOver, "exchange %d ended before", i)
				} else {
					require.ErrorIs(t, causeOf(x), errShutdown, "exchange %d", i)
				}
			}
			require.Nil(t, w.head, "nothing left watched")
			late := w.newExchange(false)
			require.ErrorIs(t, causeOf(late), errShutdown)
		})
	}
}

// TestWatchesByParent: the exchanges of one parent share its watch, another parent has
// its own, and a parent's watch leaves the map when the parent ends.
func TestWatchesByParent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ws watchesByParent
		a, cancelA := context.WithCancelCause(context.Background())
		b, cancelB := context.WithCancel(context.Background())
		defer cancelB()
		wa := ws.of(a)
		require.Same(t, wa, ws.of(a))
		require.NotSame(t, wa, ws.of(b))
		x, y := wa.newExchange(false), ws.of(b).newExchange(false)
		cancelA(connLost{})
		synctest.Wait()
		require.ErrorIs(t, causeOf(x), connLost{})
		require.NoError(t, y.Err(), "another parent's exchange runs on")
		_, inMap := ws.m.Load(context.Context(a))
		require.False(t, inMap, "the ended parent's watch is gone")
		late, outliving := ws.of(a).newExchange(false), ws.of(a).newExchange(true)
		synctest.Wait() // a new watch of an ended parent fires in a goroutine, as AfterFunc does
		require.ErrorIs(t, causeOf(late), connLost{}, "an exchange on an ended parent ends")
		require.NoError(t, outliving.Err(), "unless it outlives a lost connection")
	})
}
