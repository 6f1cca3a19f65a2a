package e2e

// The UDP path goes dark under a running tunnel (a firewall starts dropping UDP, or the
// edge moves onto a network that does): with fallback tcp the traffic moves to the TCP
// tunnel once the UDP connections' idle timeout says they are gone.

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestUDPGoesDarkFallsBackToTCP: a peer on UDP with fallback tcp whose UDP path stops
// carrying packets mid-run. No call fails: the one in flight on a UDP connection when it
// went dark waits for the idle timeout (keepalive_interval + keepalive_timeout), then the
// edge collects its answer over the TCP tunnel (a resume; or, when its request never
// reached the origin, the origin process says so and the edge sends it again). Every
// later call succeeds over TCP, and the server executed exactly the calls that succeeded.
func TestUDPGoesDarkFallsBackToTCP(t *testing.T) {
	t.Parallel()
	traffic := codecTraffic(t, 8)
	up := codecUpstream(t, traffic)
	a := newPairAddrs(t)
	startGateway(t, a.OriginAdmin, originYAML(a, up.URL(), ""))
	relay := startUDPRelay(t, a.Tunnel, 0, 0, 0, true)
	const idle = 2 * time.Second // keepalive_interval + keepalive_timeout
	edge := startGateway(t, a.EdgeAdmin, udpEdgeYAML(a, relay.Addr(), "\n      fallback: tcp\n      dial_timeout: 1s\n      keepalive_interval: 1s\n      keepalive_timeout: 1s"))
	require.Eventually(t, func() bool { return metricSum(t, edge.admin, "soapgw_udp_connections") == 2 }, 10*time.Second, 10*time.Millisecond)

	c, err := net.DialTimeout("tcp", a.Edge, 5*time.Second)
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	br := bufio.NewReader(c)
	call := 0
	next := func() (status int, body string, err error) {
		x := traffic[call%len(traffic)]
		req := fmt.Appendf(nil, "POST /svc/%s HTTP/1.1\r\nHost: %s\r\nContent-Type: text/xml; charset=utf-8\r\nSOAPAction: \"urn:%s\"\r\nX-Call: %d\r\nContent-Length: %d\r\n\r\n%s",
			x.family, a.Edge, x.name, call%len(traffic), len(x.req), x.req)
		call++
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Write(req); err != nil {
			return 0, "", err
		}
		r, err := frReadResponse(br)
		if err != nil {
			return 0, "", err
		}
		if r.Status == 200 && string(r.Body) != string(x.resp) {
			return 0, "", fmt.Errorf("call %d: response differs", call-1)
		}
		if s := r.Get("X-Soapgw-Status"); s != "" {
			// A gateway Fault (status line 500): its HTTP-semantic status.
			status, err = strconv.Atoi(s)
			return status, string(r.Body), err
		}
		return r.Status, string(r.Body), nil
	}
	for range 10 {
		status, body, err := next()
		require.NoError(t, err)
		require.Equal(t, 200, status, body)
	}
	require.Equal(t, 1.0, metricSum(t, edge.admin, "soapgw_tunnel_transport_active", "peer=dc1", "transport=udp"))
	require.Equal(t, 10.0, metricSum(t, edge.admin, "soapgw_udp_codec_messages_total", "direction=sent"), "the calls went over UDP")

	relay.blocked.Store(true)
	dark := time.Now()
	ok, failed := 10, 0
	for metricSum(t, edge.admin, "soapgw_tunnel_transport_active", "peer=dc1", "transport=tcp") != 1 {
		require.Less(t, time.Since(dark), 3*idle+5*time.Second, "traffic did not move to TCP")
		start := time.Now()
		status, body, err := next()
		require.NoError(t, err)
		took := time.Since(start)
		t.Logf("call %d after %v dark: %d in %v", call-1, start.Sub(dark).Round(time.Millisecond), status, took.Round(time.Millisecond))
		if status == 200 {
			ok++
			continue
		}
		failed++
		// The edge may close the client's connection after a gateway error: reconnect.
		_ = c.Close()
		c, err = net.DialTimeout("tcp", a.Edge, 5*time.Second)
		require.NoError(t, err)
		br = bufio.NewReader(c)
		require.Equal(t, 502, status, "a lost tunnel connection is not an exchange timeout: %s", body)
		// Sent into the dark: the edge cannot tell whether the origin had it.
		require.Regexp(t, "tunnel_lost|outcome_unknown", body)
		require.Less(t, took, idle+3*time.Second, "the call failed at the idle timeout")
	}
	require.Zero(t, failed, "the calls in flight on the dark UDP connections are resumed over TCP")
	t.Logf("UDP dark: %d calls failed, traffic on TCP after %v", failed, time.Since(dark).Round(time.Millisecond))

	tcpBefore := metricSum(t, edge.admin, "soapgw_tunnel_codec_messages_total", "direction=sent")
	for range 20 {
		status, body, err := next()
		require.NoError(t, err)
		require.Equal(t, 200, status, body)
		ok++
	}
	require.Equal(t, tcpBefore+20, metricSum(t, edge.admin, "soapgw_tunnel_codec_messages_total", "direction=sent"), "the calls went over TCP")
	require.Zero(t, metricSum(t, edge.admin, "soapgw_udp_connections"))
	require.Equal(t, 1.0, metricSum(t, edge.admin, "soapgw_tunnel_transport_switches_total", "to=tcp"))

	executed := map[string]int{}
	for _, r := range up.Requests() {
		executed[r.Header("X-Call")]++
	}
	total := 0
	for _, n := range executed {
		total += n
	}
	require.Equal(t, ok, total, "the server executed exactly the calls that succeeded (the failed ones never reached it)")
}
