package e2e

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/sockopt"
	"github.com/soapgw/soapgw/internal/testutil"
)

// Both ends of every tunnel connection run with the configured minimum RTO (default
// 20 ms) instead of the kernel's 200 ms. `ss -ti` shows the effect: after some traffic
// on loopback the current RTO (rto:N ms) is the minimum plus a few ms (the handshake
// starts it at 200+ and it decays per round trip), and the delayed-ACK timeout (ato)
// is capped below the minimum RTO instead of the kernel's 40 ms on every socket.
func TestTunnelSocketsRTOMin(t *testing.T) {
	if err := kernelHasRTOMin(); err != nil {
		// A property of the kernel, not something an install step provides.
		t.Skipf("kernel without per-socket minimum RTO: %v", err)
	}
	_, err := exec.LookPath("ss")
	testutil.Needs(t, "ss", err, "make test-deps (iproute2)")
	up := ccStartUpstream(t)
	a, _, _ := startPair(t, up.URL)
	_, port, err := net.SplitHostPort(a.Tunnel)
	require.NoError(t, err)

	// Traffic on both connections: the RTO is recomputed from RTT samples.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 60 {
		body := fmt.Appendf(nil, `<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><n>%d</n></soap:Body></soap:Envelope>`, i)
		_, err := ccRaw10(ctx, a.Edge, fmt.Sprintf("/svc/rto/%d", i), `"urn:rto"`, body)
		require.NoError(t, err)
	}
	var (
		rtos []int
		last string
	)
	require.Eventually(t, func() bool {
		// Edge side: connections to the tunnel port; origin side: from it.
		out, err := exec.Command("ss", "-tin", "state", "established",
			"( dport = :"+port+" or sport = :"+port+" )").CombinedOutput()
		require.NoError(t, err, "%s", out)
		last = string(out)
		rtos = parseField(rtoField, last)
		return len(rtos) >= 4 // connections: 2, both ends
	}, 10*time.Second, 50*time.Millisecond)
	// A connection's RTO decays from the handshake's 200+ ms once per round trip of
	// its own traffic, and the exchanges are spread over two connections unevenly: the
	// busiest one must be down near the minimum.
	require.Less(t, slices.Min(rtos), 60, "tunnel socket RTOs (ms): %v; the kernel default would be 200+\n%s", rtos, last)
	atos := parseField(atoField, last)
	require.Len(t, atos, len(rtos))
	for _, ato := range atos {
		require.Less(t, ato, 40, "tunnel socket delayed-ACK timeouts (ms): %v\n%s", atos, last)
	}
}

var (
	rtoField = regexp.MustCompile(`\brto:(\d+)`)
	atoField = regexp.MustCompile(`\bato:(\d+)`)
)

// parseField returns the integer part of every match of field in ss.
func parseField(field *regexp.Regexp, ss string) []int {
	var vals []int
	for _, m := range field.FindAllStringSubmatch(ss, -1) {
		n, err := strconv.Atoi(strings.TrimSpace(m[1]))
		if err == nil {
			vals = append(vals, n)
		}
	}
	return vals
}

func kernelHasRTOMin() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = sockopt.RTOMin(c)
	return err
}
