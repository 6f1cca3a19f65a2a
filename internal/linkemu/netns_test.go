//go:build linux

package linkemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soapgw/soapgw/internal/testutil"
)

var (
	netnsOnce sync.Once
	netnsSkip string
)

// needNetns skips the test unless we are root and `ip netns` and
// /dev/net/tun work here.
func needNetns(t testing.TB) {
	t.Helper()
	netnsOnce.Do(func() {
		if os.Geteuid() != 0 {
			netnsSkip = "needs root for network namespaces and TUN devices"
			return
		}
		if _, err := os.Stat("/dev/net/tun"); err != nil {
			netnsSkip = "no /dev/net/tun: " + err.Error()
			return
		}
		name := fmt.Sprintf("lemuprobe%d", os.Getpid())
		if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
			netnsSkip = fmt.Sprintf("ip netns add fails: %v: %s", err, strings.TrimSpace(string(out)))
			return
		}
		_ = exec.Command("ip", "netns", "del", name).Run()
	})
	if netnsSkip != "" {
		testutil.Needs(t, "network namespaces", errors.New(netnsSkip), "run as root with iproute2 (make test-deps)")
	}
}

// testName makes a namespace prefix unique to this process and test.
func testName(tag string) string { return fmt.Sprintf("lt%d%s", os.Getpid()%100000, tag) }

// newTestLink sets up a link that t's cleanup closes.
func newTestLink(t testing.TB, tag string, p Profile) *Link {
	t.Helper()
	needNetns(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := Setup(ctx, p, Options{Name: testName(tag), Seed: 42})
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

func netnsList(t testing.TB) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v", err)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names
}

// udpEcho serves a UDP echo in the server namespace until t ends.
func udpEcho(t testing.TB, l *Link) net.Addr {
	t.Helper()
	pc, err := l.ListenPacket(l.ServerNS(), "udp4", net.JoinHostPort(l.ServerAddr().String(), "0"))
	if err != nil {
		t.Fatalf("ListenPacket: %v", err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { pc.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if _, err := pc.WriteTo(buf[:n], from); err != nil {
				return
			}
		}
	}()
	return pc.LocalAddr()
}

// tcpEcho serves a TCP echo in the server namespace until t ends.
func tcpEcho(t testing.TB, l *Link) net.Addr {
	t.Helper()
	ln, err := l.Listen(l.ServerNS(), "tcp4", net.JoinHostPort(l.ServerAddr().String(), "0"))
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	// Every goroutine ends with the test: the accept loop when the listener closes, each
	// echo when its connection is closed here (a client that never closes would
	// otherwise keep its copy goroutine, and goleak would say so).
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr()
}

// pingPong sends n messages of size bytes over c, each after the echo of
// the previous one, and returns the round-trip times.
func pingPong(t testing.TB, c net.Conn, n, size int, udp bool) []time.Duration {
	t.Helper()
	msg := make([]byte, size)
	buf := make([]byte, size)
	rtts := make([]time.Duration, 0, n)
	for i := range n {
		msg[0] = byte(i)
		if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := c.Write(msg); err != nil {
			t.Fatalf("ping %d: write: %v", i, err)
		}
		for {
			var err error
			if udp {
				_, err = c.Read(buf)
			} else {
				_, err = io.ReadFull(c, buf)
			}
			if err != nil {
				t.Fatalf("ping %d: read: %v", i, err)
			}
			if buf[0] == byte(i) {
				break // a UDP duplicate or late echo of an earlier ping is skipped
			}
		}
		rtts = append(rtts, time.Since(start))
	}
	return rtts
}

// percentile returns the q-quantile (0..1) of d.
func percentile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

// trimmedMean is the mean of d without its lowest and highest 5 %.
func trimmedMean(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	k := len(s) / 20
	s = s[k : len(s)-k]
	var sum time.Duration
	for _, v := range s {
		sum += v
	}
	return sum / time.Duration(len(s))
}

// Tests that need namespaces run one at a time: their timing checks are
// meant to measure the emulator, not each other's load.

func summarize(d []time.Duration) (mean, p50, lo, hi time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	var sum time.Duration
	for _, v := range s {
		sum += v
	}
	return sum / time.Duration(len(s)), s[len(s)/2], s[0], s[len(s)-1]
}

func TestSetupClose(t *testing.T) {
	needNetns(t)
	ctx := context.Background()
	name := testName("sc")
	l, err := Setup(ctx, Profile{Name: "perfect"}, Options{Name: name})
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	if l.ClientNS() != name+"-c" || l.ServerNS() != name+"-s" {
		t.Errorf("namespaces %q %q", l.ClientNS(), l.ServerNS())
	}
	if l.ClientAddr().String() != "10.213.0.1" || l.ServerAddr().String() != "10.213.0.2" {
		t.Errorf("addresses %v %v", l.ClientAddr(), l.ServerAddr())
	}
	names := netnsList(t)
	if !slices.Contains(names, l.ClientNS()) || !slices.Contains(names, l.ServerNS()) {
		t.Fatalf("ip netns list = %v, want both namespaces", names)
	}

	// lo is up in both (gateways talk to a local server over lo), and the
	// link carries traffic.
	for _, ns := range []string{l.ClientNS(), l.ServerNS()} {
		ln, err := l.Listen(ns, "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen on lo in %s: %v", ns, err)
		}
		c, err := l.DialContext(ctx, ns, "tcp4", ln.Addr().String())
		if err != nil {
			t.Errorf("dial over lo in %s: %v", ns, err)
		} else {
			c.Close()
		}
		ln.Close()
	}
	addr := udpEcho(t, l)
	c, err := l.DialContext(ctx, l.ClientNS(), "udp4", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	pingPong(t, c, 3, 100, true)
	c.Close()
	// IPv6 is off, so nothing but our datagrams crossed the link.
	if st := l.Stats(); st.Up.OtherPackets+st.Down.OtherPackets != 0 || st.Up.UDPPackets != 3 || st.Down.UDPPackets != 3 {
		t.Errorf("stats after 3 UDP ping-pongs: %+v", st)
	}
	if out, err := l.Command(l.ClientNS(), "cat", "/proc/sys/net/ipv6/conf/all/disable_ipv6").Output(); err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Errorf("disable_ipv6 in client ns = %q, %v", out, err)
	}
	out, err := l.Command(l.ServerNS(), "ip", "-4", "-o", "addr").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "10.213.0.2/24") {
		t.Errorf("Command(ip addr) in server ns: %v\n%s", err, out)
	}

	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	names = netnsList(t)
	if slices.Contains(names, l.ClientNS()) || slices.Contains(names, l.ServerNS()) {
		t.Fatalf("after Close ip netns list = %v", names)
	}
	if _, err := l.DialContext(ctx, l.ClientNS(), "udp4", addr.String()); err == nil {
		t.Error("DialContext after Close succeeded")
	}
}

// TestSetupLeftover: a crashed run leaves namespaces (with a device and a
// listening process-less socket in them) behind; Setup replaces them.
func TestSetupLeftover(t *testing.T) {
	needNetns(t)
	name := testName("lo")
	for _, ns := range []string{name + "-c", name + "-s"} {
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add: %v %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		if out, err := exec.Command("ip", "-n", ns, "tuntap", "add", "mode", "tun", "name", "stale0").CombinedOutput(); err != nil {
			t.Logf("cannot add a persistent TUN device (ignored): %v %s", err, out)
		}
	}
	l, err := Setup(context.Background(), Profile{}, Options{Name: name})
	if err != nil {
		t.Fatalf("Setup over leftovers: %v", err)
	}
	out, err := l.Command(l.ClientNS(), "ip", "-o", "link").CombinedOutput()
	if err != nil || strings.Contains(string(out), "stale0") || !strings.Contains(string(out), tunName) {
		t.Errorf("client ns links after Setup: %v\n%s", err, out)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if names := netnsList(t); slices.Contains(names, l.ClientNS()) || slices.Contains(names, l.ServerNS()) {
		t.Fatalf("after Close ip netns list = %v", names)
	}
}

func TestSetupInvalid(t *testing.T) {
	ctx := context.Background()
	for _, o := range []Options{{}, {Name: "bad name"}, {Name: strings.Repeat("x", 33)}} {
		if _, err := Setup(ctx, Profile{}, o); err == nil {
			t.Errorf("Setup(%+v) succeeded", o)
		}
	}
	if _, err := Setup(ctx, Profile{Up: Shape{Loss: 2}}, Options{Name: "x"}); err == nil {
		t.Error("Setup with loss 2 succeeded")
	}
}
