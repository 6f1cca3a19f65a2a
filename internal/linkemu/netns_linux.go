package linkemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// netnsDir is where ip(8) bind-mounts named namespaces.
const netnsDir = "/var/run/netns"

// tunName is the TUN device in both namespaces; they are separate, so one
// name serves both.
const tunName = "lemu0"

// nsMu serializes our ip netns add/del: the first `ip netns add` on a host
// sets up the shared mount of netnsDir, and two at once can race there.
var nsMu sync.Mutex

func nsPath(name string) string { return filepath.Join(netnsDir, name) }

func nsExists(name string) bool {
	_, err := os.Lstat(nsPath(name))
	return err == nil
}

func ipCommand(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, "ip", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("linkemu: ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// createNamespaces creates the named namespaces, deleting leftovers of a
// crashed run with the same names first. On error nothing is left behind.
func createNamespaces(ctx context.Context, names ...string) error {
	nsMu.Lock()
	defer nsMu.Unlock()
	for _, n := range names {
		if nsExists(n) {
			if err := ipCommand(ctx, "netns", "del", n); err != nil {
				return fmt.Errorf("linkemu: removing leftover namespace: %w", err)
			}
		}
	}
	for i, n := range names {
		if err := ipCommand(ctx, "netns", "add", n); err != nil {
			for _, m := range names[:i] {
				_ = ipCommand(context.Background(), "netns", "del", m)
			}
			return err
		}
	}
	return nil
}

func deleteNamespaces(names ...string) error {
	nsMu.Lock()
	defer nsMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	for _, n := range names {
		if !nsExists(n) {
			continue
		}
		if err := ipCommand(ctx, "netns", "del", n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// runInNS runs fn on an OS thread switched into the named namespace.
// Sockets and devices fn creates belong to that namespace and work from any
// thread afterwards. The thread is switched back and returned to the
// runtime; if switching back fails, it stays locked and exits with its
// goroutine, so no other goroutine ever runs in the wrong namespace.
func runInNS(ns string, fn func() error) error {
	target, err := unix.Open(nsPath(ns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("linkemu: netns %q: %w", ns, err)
	}
	defer unix.Close(target)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("linkemu: current netns: %w", err)
			return
		}
		defer unix.Close(orig)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("linkemu: setns %q: %w", ns, err)
			return
		}
		err = fn()
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// setupSite configures the namespace ns: IPv6 off (no DAD, router
// solicitations or MLD reports on the link), lo up, and a TUN device with
// addr/bits, MTU 1500, up. It returns the TUN's file descriptor, opened
// non-blocking; the device lives as long as the descriptor.
func setupSite(ns string, addr netip.Addr, bits int) (int, error) {
	tun := -1
	err := runInNS(ns, func() error {
		// /proc/sys/net follows the namespace of the thread that opens it.
		for _, f := range []string{"all", "default"} {
			p := "/proc/sys/net/ipv6/conf/" + f + "/disable_ipv6"
			if err := os.WriteFile(p, []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("linkemu: %s in %s: %w", p, ns, err)
			}
		}
		sock, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("linkemu: socket in %s: %w", ns, err)
		}
		defer unix.Close(sock)
		if err := ifUp(sock, "lo"); err != nil {
			return fmt.Errorf("linkemu: lo up in %s: %w", ns, err)
		}

		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return fmt.Errorf("linkemu: open /dev/net/tun: %w", err)
		}
		if err := configureTun(sock, fd, addr, bits); err != nil {
			unix.Close(fd)
			return fmt.Errorf("linkemu: TUN in %s: %w", ns, err)
		}
		tun = fd
		return nil
	})
	return tun, err
}

func configureTun(sock, fd int, addr netip.Addr, bits int) error {
	ifr, err := unix.NewIfreq(tunName)
	if err != nil {
		return err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		return fmt.Errorf("TUNSETIFF: %w", err)
	}
	ifr, _ = unix.NewIfreq(tunName)
	ifr.SetUint32(mtu)
	if err := unix.IoctlIfreq(sock, unix.SIOCSIFMTU, ifr); err != nil {
		return fmt.Errorf("SIOCSIFMTU: %w", err)
	}
	a4 := addr.As4()
	ifr, _ = unix.NewIfreq(tunName)
	if err := ifr.SetInet4Addr(a4[:]); err != nil {
		return err
	}
	if err := unix.IoctlIfreq(sock, unix.SIOCSIFADDR, ifr); err != nil {
		return fmt.Errorf("SIOCSIFADDR: %w", err)
	}
	m := [4]byte{}
	for i := range bits {
		m[i/8] |= 0x80 >> (i % 8)
	}
	ifr, _ = unix.NewIfreq(tunName)
	if err := ifr.SetInet4Addr(m[:]); err != nil {
		return err
	}
	if err := unix.IoctlIfreq(sock, unix.SIOCSIFNETMASK, ifr); err != nil {
		return fmt.Errorf("SIOCSIFNETMASK: %w", err)
	}
	return ifUp(sock, tunName)
}

func ifUp(sock int, name string) error {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(sock, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCGIFFLAGS %s: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(sock, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCSIFFLAGS %s: %w", name, err)
	}
	return nil
}

// monoNow returns the current time together with CLOCK_MONOTONIC in ns,
// read back to back, so that Link clock values (time.Since(epoch)) convert
// to absolute timerfd deadlines. Go's monotonic clock is CLOCK_MONOTONIC
// too, so the offset is stable.
func monoNow() (time.Time, int64) {
	var ts unix.Timespec
	t := time.Now()
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return t, ts.Nano()
}
