package linkemu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// linkSys holds the devices the forwarder works on.
type linkSys struct {
	clientTun, serverTun *os.File // opened inside the namespaces, non-blocking
	dirs                 []*direction
}

const (
	// initialLead and maxLead bound the wake-up lead (see direction).
	initialLead = 20 * time.Microsecond
	maxLead     = 250 * time.Microsecond
)

// Setup creates the two namespaces (lo up, IPv6 off), a TUN device in each
// with the client and server addresses, and starts the forwarder. ctx
// bounds Setup only; the link lives until Close. Setup needs root (or
// CAP_NET_ADMIN and CAP_SYS_ADMIN), the ip(8) command and /dev/net/tun.
func Setup(ctx context.Context, p Profile, o Options) (*Link, error) {
	o, err := o.normalize()
	if err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("linkemu: %w", err)
	}
	l := newLink(p, o)
	if err := createNamespaces(ctx, l.clientNS, l.serverNS); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			l.release()
		}
	}()

	bits := o.Subnet.Bits()
	for _, site := range []struct {
		ns   string
		addr netip.Addr
		f    **os.File
	}{{l.clientNS, l.clientAddr, &l.sys.clientTun}, {l.serverNS, l.serverAddr, &l.sys.serverTun}} {
		fd, err := setupSite(site.ns, site.addr, bits)
		if err != nil {
			return nil, err
		}
		// The fd is non-blocking, so os.NewFile registers it with the
		// runtime poller: a blocked Read parks the goroutine, not a thread,
		// and Close wakes it.
		*site.f = os.NewFile(uintptr(fd), site.ns+"/"+tunName)
	}
	ct, st := l.sys.clientTun, l.sys.serverTun
	// Write errors are not reported: a TUN write fails only when the
	// device is going away, and the packet is then lost as on a real link.
	l.up = newPipe(p.Up, o.Seed, 1, func(b []byte) { _, _ = st.Write(b) })
	l.down = newPipe(p.Down, o.Seed, 2, func(b []byte) { _, _ = ct.Write(b) })
	for _, d := range []struct {
		p   *pipe
		src *os.File
	}{{l.up, ct}, {l.down, st}} {
		dir, err := newDirection(l, d.p, d.src)
		if err != nil {
			return nil, err
		}
		l.sys.dirs = append(l.sys.dirs, dir)
	}
	for _, d := range l.sys.dirs {
		l.wg.Add(2)
		go d.readLoop()
		go d.schedLoop()
	}
	ok = true
	return l, nil
}

// Close stops the forwarder, closes the TUN devices and deletes both
// namespaces. It is idempotent and returns the same error every time: the
// first error that stopped a forwarder goroutine, joined with any error
// deleting the namespaces. Processes still running in a namespace (started
// with Command) keep it alive, unnamed, until they exit; stop them first.
func (l *Link) Close() error {
	l.closeOnce.Do(func() {
		l.closing.Store(true)
		// Closing the files wakes the goroutines blocked reading them.
		for _, d := range l.sys.dirs {
			d.timer.Close()
		}
		for _, f := range []*os.File{l.sys.clientTun, l.sys.serverTun} {
			if f != nil {
				f.Close()
			}
		}
		l.wg.Wait()
		var errs []error
		if e := l.loopErr.Load(); e != nil {
			errs = append(errs, *e)
		}
		if err := l.release(); err != nil {
			errs = append(errs, err)
		}
		l.closeErr = errors.Join(errs...)
	})
	return l.closeErr
}

// release frees what Setup acquired; the goroutines must have stopped.
func (l *Link) release() error {
	for _, d := range l.sys.dirs {
		d.timer.Close()
	}
	for _, f := range []*os.File{l.sys.clientTun, l.sys.serverTun} {
		if f != nil {
			f.Close()
		}
	}
	if l.up != nil {
		l.up.drain()
		l.down.drain()
	}
	return deleteNamespaces(l.clientNS, l.serverNS)
}

// direction runs one direction of the forwarder with two goroutines around
// a pipe:
//
//	src TUN --readLoop--> admit --(due now, heap empty)--> write to far TUN
//	                        \--> heap (due, seq) --timerfd--> schedLoop: deliver --> write
//
// readLoop reads packets and admits them; schedLoop sleeps on a timerfd
// armed for the earliest due time in the heap and delivers what is due.
// The mutex guards the pipe's heap and the timer.
//
// Why a timerfd and not a time.Timer: the runtime's timers are driven by
// the netpoller's epoll wait, which has millisecond resolution; on the test
// VM a 50 µs time.Timer fired 1.07 ms late (p50), a 20 ms one 0.3 ms late.
// A timerfd is an hrtimer with a nanosecond absolute deadline that becomes
// readable on time, and the goroutine waiting on it is woken by the
// netpoller like a socket read: 10-40 µs late on the same VM. The
// remaining lateness is measured on every timer wake-up and the timer is
// armed early by its running mean ("lead"), delivering what is due by then,
// so the mean delivery error is close to zero.
//
// Why not a locked thread blocked in ppoll(2), which is as precise: a
// goroutine blocked in a system call keeps its P, and with two directions
// per link and GOMAXPROCS=2 both Ps sat in the forwarder's ppoll while the
// application's goroutines waited for sysmon to retake one (≈1 ms).
// Goroutines parked in the netpoller hold no P.
type direction struct {
	l     *Link
	p     *pipe
	src   *os.File
	timer *os.File // timerfd, non-blocking, in the runtime poller
	tfd   int

	mu    sync.Mutex
	armed int64 // deadline the timer is armed for (Link clock), 0 = none
	lead  int64 // expected wake-up lateness, ns
}

func newDirection(l *Link, p *pipe, src *os.File) (*direction, error) {
	tfd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("linkemu: timerfd: %w", err)
	}
	return &direction{
		l: l, p: p, src: src, tfd: tfd,
		timer: os.NewFile(uintptr(tfd), "linkemu-timer"),
		lead:  int64(initialLead),
	}, nil
}

// arm makes sure the timer fires by the head packet's due time (minus the
// lead). With FIFO traffic a new packet is the head only when the heap was
// empty, so this is about one timerfd_settime per delivery. d.mu is held.
func (d *direction) arm() {
	due, ok := d.p.next()
	if !ok {
		return // an armed timer will fire for nothing; cheaper than disarming
	}
	at := max(due-d.lead, 1)
	if d.armed != 0 && d.armed <= at {
		return
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(d.l.monoBase + at)}
	if err := unix.TimerfdSettime(d.tfd, unix.TFD_TIMER_ABSTIME, &spec, nil); err != nil {
		d.l.setLoopErr(fmt.Errorf("linkemu: timerfd_settime: %w", err))
		return
	}
	d.armed = at
}

func (d *direction) readLoop() {
	defer d.l.wg.Done()
	for {
		pk := getPacket()
		n, err := d.src.Read(pk.buf[:])
		if err != nil {
			putPacket(pk)
			if !errors.Is(err, os.ErrClosed) {
				d.l.setLoopErr(fmt.Errorf("linkemu: read %s: %w", d.src.Name(), err))
			}
			return
		}
		pk.n = n
		d.mu.Lock()
		d.p.admit(pk, d.l.now())
		d.arm()
		d.mu.Unlock()
	}
}

func (d *direction) schedLoop() {
	defer d.l.wg.Done()
	var ticks [8]byte
	for {
		if _, err := d.timer.Read(ticks[:]); err != nil {
			if !errors.Is(err, os.ErrClosed) {
				d.l.setLoopErr(fmt.Errorf("linkemu: read timerfd: %w", err))
			}
			return
		}
		d.mu.Lock()
		now := d.l.now()
		if d.armed != 0 {
			if late := now - d.armed; late >= 0 {
				d.lead = min(max(d.lead+(late-d.lead)/8, 0), int64(maxLead))
			}
		}
		d.armed = 0
		d.p.deliver(now, d.lead)
		d.arm()
		d.mu.Unlock()
	}
}

// Command returns a command that runs name in namespace ns (`ip netns exec
// ns name args...`), with the caller's environment. ns "" means the
// current namespace.
func (l *Link) Command(ns string, name string, args ...string) *exec.Cmd {
	if ns == "" {
		return exec.Command(name, args...)
	}
	return exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// DialContext dials addr from inside namespace ns ("" for the current
// one). The socket is created on a thread switched into ns; the returned
// conn works from any goroutine. Use IP literals: host names are resolved
// by the Go resolver, possibly from the current namespace.
func (l *Link) DialContext(ctx context.Context, ns, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := l.inNS(ns, func() error {
		// A negative FallbackDelay keeps the dial sequential, so every
		// socket is created on this (switched) thread.
		d := net.Dialer{FallbackDelay: -1}
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Listen listens on addr inside namespace ns ("" for the current one).
func (l *Link) Listen(ns, network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := l.inNS(ns, func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

// ListenPacket listens on addr inside namespace ns ("" for the current
// one).
func (l *Link) ListenPacket(ns, network, addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := l.inNS(ns, func() error {
		var err error
		pc, err = net.ListenPacket(network, addr)
		return err
	})
	return pc, err
}

func (l *Link) inNS(ns string, fn func() error) error {
	if ns == "" {
		return fn()
	}
	if l.closing.Load() && (ns == l.clientNS || ns == l.serverNS) {
		return fmt.Errorf("linkemu: netns %q: %w", ns, net.ErrClosed)
	}
	return runInNS(ns, fn)
}
