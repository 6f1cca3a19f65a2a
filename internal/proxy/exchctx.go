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
// when somebody asks for it, an exchange that ends normally starts no goroutine, and the
// parent is watched once for all its exchanges (parentWatch).
//
// It implements AfterFunc the way the context package looks for it, so a context derived
// from it (a dial's) registers a hook instead of a goroutine. It carries no values: the
// gateway puts none in contexts, and handing the parent's through would hand
// context.Cause the parent's cancellation state (it finds that through Value), the
// session's cause instead of the exchange's. context.Cause gives Err: use causeOf.
type exchangeCtx struct {
	watch   *parentWatch
	outlive bool // survives its parent's lost connection (newExchange)

	mu    sync.Mutex
	done  chan struct{} // made by Done; closed when it ends
	cause error         // why it ended; nil while it runs
	hooks []ctxHook     // to run once when it ends
	next  uint64        // id of the next hook
	room  [2]ctxHook    // hooks' first backing array: an exchange registers one or two

	// In the parent's watch list while it runs (guarded by watch.mu).
	watchPrev, watchNext *exchangeCtx
	watched              bool
}

type ctxHook struct {
	id uint64
	f  func()
}

// closedChan is the Done channel of an exchange context that ended before anybody asked.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// parentWatch ends the exchanges of one long-lived context (the edge's drain, a tunnel
// connection's) when it ends: one context.AfterFunc for all of them. With one per
// exchange, each exchange allocated the context package's hook context and a closure,
// and put an entry into the parent's map, under the parent's lock that every exchange
// in flight shares, and took it out again at its end.
type parentWatch struct {
	parent context.Context

	mu    sync.Mutex
	ended bool
	cause error        // the parent's, once ended
	head  *exchangeCtx // exchanges running, linked through watchPrev and watchNext
}

// watchParent watches parent for the exchanges made with newExchange.
func watchParent(parent context.Context) *parentWatch {
	w := newParentWatch(parent)
	w.start(nil)
	return w
}

func newParentWatch(parent context.Context) *parentWatch { return &parentWatch{parent: parent} }

// start registers the watch with its parent; then, once it ended, runs after (if set).
func (w *parentWatch) start(after func()) {
	context.AfterFunc(w.parent, func() {
		w.fire()
		if after != nil {
			after()
		}
	})
}

// fire ends the exchanges watched, with the parent's cause.
func (w *parentWatch) fire() {
	cause := context.Cause(w.parent)
	w.mu.Lock()
	w.ended, w.cause = true, cause
	var ending []*exchangeCtx
	for x := w.head; x != nil; {
		next := x.watchNext
		x.watchPrev, x.watchNext, x.watched = nil, nil, false
		ending = append(ending, x)
		x = next
	}
	w.head = nil
	w.mu.Unlock()
	for _, x := range ending {
		x.parentEnded(cause)
	}
}

// newExchange returns the context of an exchange under the watched parent. It ends when
// the parent does, except, when outlive is set (a held exchange, for the edge to collect
// its response on another connection; a one-way delivery), when the parent ends because
// its connection was lost (a cause with ConnectionLost, from the tunnel server): then it
// ends only for the other reasons (shutdown).
func (w *parentWatch) newExchange(outlive bool) *exchangeCtx {
	x := &exchangeCtx{watch: w, outlive: outlive}
	x.hooks = x.room[:0]
	w.mu.Lock()
	if w.ended {
		cause := w.cause
		w.mu.Unlock()
		x.parentEnded(cause)
		return x
	}
	x.watched, x.watchNext = true, w.head
	if w.head != nil {
		w.head.watchPrev = x
	}
	w.head = x
	w.mu.Unlock()
	return x
}

// unwatch takes x out of the watch list, if it is still in it.
func (w *parentWatch) unwatch(x *exchangeCtx) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !x.watched {
		return
	}
	if x.watchPrev != nil {
		x.watchPrev.watchNext = x.watchNext
	} else {
		w.head = x.watchNext
	}
	if x.watchNext != nil {
		x.watchNext.watchPrev = x.watchPrev
	}
	x.watchPrev, x.watchNext, x.watched = nil, nil, false
}

// parentEnded ends x for its parent's cause, unless x outlives a lost connection.
func (x *exchangeCtx) parentEnded(cause error) {
	var cl interface{ ConnectionLost() bool }
	if x.outlive && errors.As(cause, &cl) && cl.ConnectionLost() {
		return
	}
	x.end(cause)
}

// watchesByParent finds the watch of a parent context among those in use, making it
// on first use; a watch leaves the map when its parent ends. For the origin, whose
// exchanges each come with their tunnel connection's context. Parents are map keys, so
// they must be comparable: every context the standard library makes is a pointer.
type watchesByParent struct{ m sync.Map } // context.Context -> *parentWatch

func (ws *watchesByParent) of(parent context.Context) *parentWatch {
	if w, ok := ws.m.Load(parent); ok {
		return w.(*parentWatch)
	}
	w := newParentWatch(parent)
	if got, loaded := ws.m.LoadOrStore(parent, w); loaded {
		return got.(*parentWatch)
	}
	w.start(func() { ws.m.CompareAndDelete(parent, w) })
	return w
}

// end ends the exchange with cause (context.Canceled if nil) unless it ended already,
// then runs the hooks still registered, in a goroutine of their own as context.AfterFunc
// does: the caller may hold locks a hook takes (a stream failing on its connection's
// reader). It leaves its parent's watch.
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
	x.mu.Unlock()
	x.watch.unwatch(x)
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
	id, ok := x.hook(f)
	if !ok {
		return func() bool { return false }
	}
	return func() bool { return x.unhook(id) }
}

// hook is AfterFunc for the gateway's own code, without a stop function to allocate:
// unhook(id) unregisters f. ok is false if the exchange had ended (f runs at once).
func (x *exchangeCtx) hook(f func()) (id uint64, ok bool) {
	x.mu.Lock()
	if x.cause != nil {
		x.mu.Unlock()
		go f()
		return 0, false
	}
	id = x.next
	x.next++
	x.hooks = append(x.hooks, ctxHook{id, f})
	x.mu.Unlock()
	return id, true
}

// ctxHookRef is a hook registered with hookOnce: a value, so stopping it allocates no
// function.
type ctxHookRef struct {
	x  *exchangeCtx
	id uint64
	ok bool // registered: the exchange had not ended
}

// hookOnce is hook returning a reference whose stop unregisters f.
func (x *exchangeCtx) hookOnce(f func()) ctxHookRef {
	id, ok := x.hook(f)
	return ctxHookRef{x, id, ok}
}

// stop unregisters the hook and reports whether that kept it from running (as
// AfterFunc's stop).
func (r ctxHookRef) stop() bool { return r.ok && r.x.unhook(r.id) }

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

func (x *exchangeCtx) Deadline() (time.Time, bool) { return x.watch.parent.Deadline() }
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

// causeOf is context.Cause that also knows exchange contexts.
func causeOf(ctx context.Context) error {
	if x, ok := ctx.(*exchangeCtx); ok {
		return x.Cause()
	}
	return context.Cause(ctx)
}
