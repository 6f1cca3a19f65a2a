package proxy

import (
	"context"
	"errors"
	"sync"
	"time"
)

// exchangeCtx is the context of one exchange, at the edge or the origin. It ends once,
// with a cause: when its progress clock expires, when the other side or the client
// abandons the exchange, with its parent (the edge's drain, the origin's tunnel
// connection or server), or when the exchange is over.
//
// It exists for the cost of the common case. The standard library's equivalent (a
// WithCancelCause child, WithoutCancel for exchanges that outlive their connection, and an
// AfterFunc per hook on it) allocated a dozen objects per exchange and inserted each hook
// into its parent's map; here a hook is an entry in a slice, the done channel is made only
// when somebody asks for it, and an exchange that ends normally starts no goroutine.
//
// It implements AfterFunc the way the context package looks for it, so a context derived
// from it (a dial's) registers a hook instead of a goroutine. It carries no values: the
// gateway puts none in contexts, and handing the parent's through would hand
// context.Cause the parent's cancellation state (it finds that through Value), the
// session's cause instead of the exchange's. context.Cause gives Err: use causeOf.
type exchangeCtx struct {
	parent     context.Context
	stopParent func() bool

	mu    sync.Mutex
	done  chan struct{} // made by Done; closed when it ends
	cause error         // why it ended; nil while it runs
	hooks []ctxHook     // to run once when it ends
	next  uint64        // id of the next hook
	room  [2]ctxHook    // hooks' first backing array: an exchange registers one or two
}

type ctxHook struct {
	id uint64
	f  func()
}

// closedChan is the Done channel of an exchange context that ended before anybody asked.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// newExchangeCtx returns the context of an exchange whose stream's context is parent. It
// ends when parent does, except, when outlive is set (a held exchange, for the edge to
// collect its response on another connection; a one-way delivery), when parent ends
// because its connection was lost (a cause with ConnectionLost, from the tunnel server):
// then it ends only for the other reasons (shutdown).
func newExchangeCtx(parent context.Context, outlive bool) *exchangeCtx {
	x := &exchangeCtx{parent: parent}
	x.hooks = x.room[:0]
	x.mu.Lock() // end, run by the parent's hook, reads stopParent
	defer x.mu.Unlock()
	x.stopParent = context.AfterFunc(parent, func() {
		cause := context.Cause(parent)
		var cl interface{ ConnectionLost() bool }
		if outlive && errors.As(cause, &cl) && cl.ConnectionLost() {
			return
		}
		x.end(cause)
	})
	return x
}

// end ends the exchange with cause (context.Canceled if nil) unless it ended already,
// then runs the hooks still registered, in a goroutine of their own as context.AfterFunc
// does: the caller may hold locks a hook takes (a stream failing on its connection's
// reader). It releases the parent's hook.
func (x *exchangeCtx) end(cause error) {
	if cause == nil {
		cause = context.Canceled
	}
	x.mu.Lock()
	if x.cause != nil {
		x.mu.Unlock()
		return
	}
	x.cause = cause
	if x.done != nil {
		close(x.done)
	}
	hooks := x.hooks
	x.hooks = nil
	stopParent := x.stopParent
	x.mu.Unlock()
	if stopParent != nil { // nil: the parent's hook is running this
		stopParent()
	}
	if len(hooks) > 0 {
		go func() {
			for _, h := range hooks {
				h.f()
			}
		}()
	}
}

// AfterFunc arranges for f to run once the exchange ends (at once, in a goroutine, if it
// has); stop unregisters it and reports whether that kept f from running.
func (x *exchangeCtx) AfterFunc(f func()) (stop func() bool) {
	x.mu.Lock()
	if x.cause != nil {
		x.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	id := x.next
	x.next++
	x.hooks = append(x.hooks, ctxHook{id, f})
	x.mu.Unlock()
	return func() bool { return x.unhook(id) }
}

func (x *exchangeCtx) unhook(id uint64) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	for i, h := range x.hooks {
		if h.id == id {
			x.hooks = append(x.hooks[:i], x.hooks[i+1:]...)
			return true
		}
	}
	return false
}

// Cause is why the exchange ended (nil while it runs).
func (x *exchangeCtx) Cause() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.cause
}

func (x *exchangeCtx) Deadline() (time.Time, bool) { return x.parent.Deadline() }
func (x *exchangeCtx) Value(any) any               { return nil }

func (x *exchangeCtx) Done() <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.done == nil {
		if x.cause != nil {
			return closedChan
		}
		x.done = make(chan struct{})
	}
	return x.done
}

// Err is context.Canceled once the exchange ended (whatever the cause: causeOf tells),
// context.DeadlineExceeded if it ended for its parent's deadline.
func (x *exchangeCtx) Err() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	switch {
	case x.cause == nil:
		return nil
	case errors.Is(x.cause, context.DeadlineExceeded):
		return context.DeadlineExceeded
	}
	return context.Canceled
}

// afterFunc is context.AfterFunc that registers straight with an exchange context (the
// context package would also make its Done channel and a context to carry the hook).
func afterFunc(ctx context.Context, f func()) (stop func() bool) {
	if x, ok := ctx.(*exchangeCtx); ok {
		return x.AfterFunc(f)
	}
	return context.AfterFunc(ctx, f)
}

// causeOf is context.Cause that also knows exchange contexts.
func causeOf(ctx context.Context) error {
	if x, ok := ctx.(*exchangeCtx); ok {
		return x.Cause()
	}
	return context.Cause(ctx)
}
