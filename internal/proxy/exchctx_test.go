package proxy

import (
	"context"
	"errors"
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
		x := newExchangeCtx(context.Background(), false)
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
				x := newExchangeCtx(parent, c.outlive)
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
			x := newExchangeCtx(parent, false)
			synctest.Wait()
			require.ErrorIs(t, causeOf(x), errFirst)
		})
	})
}

// An exchange that ends normally allocates no more than its context, the parent's hook
// and the stop functions of its hooks.
func TestExchangeCtxAllocs(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	allocs := testing.AllocsPerRun(100, func() {
		x := newExchangeCtx(parent, true)
		stop := x.AfterFunc(func() {})
		stop()
		x.end(nil)
	})
	t.Logf("%.0f allocations", allocs)
	require.LessOrEqual(t, allocs, 5.0)
}
