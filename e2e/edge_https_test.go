package e2e

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/testutil"
)

// TestEdgeHTTPSListener: an edge listener with tls serves clients configured with an https
// URL: the call crosses the pair byte for byte (the server gets the request's body, the
// client the server's answer). A client that speaks plain HTTP to it gets a 400 Fault
// saying the listener speaks HTTPS, counted by reason. With ca_file, a client without a
// certificate signed by it cannot call, and one with such a certificate can.
func TestEdgeHTTPSListener(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "clients-ca")
	edgeCert, edgeKey := ca.issue(t, dir, "soap.internal", true)
	cliCert, cliKey := ca.issue(t, dir, "billing-client", false)
	roots := ca.pool()
	clientCert, err := tls.LoadX509KeyPair(cliCert, cliKey)
	require.NoError(t, err)

	const answer = "<ok>over tls</ok>"
	bodies := make(chan string, 16)
	url := "http://" + testutil.RawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			if _, err := readRawRequestHead(br); err != nil {
				return
			}
			body := make([]byte, len(smallBody))
			if _, err := io.ReadFull(br, body); err != nil {
				return
			}
			bodies <- string(body)
			_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/xml; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
		}
	})
	// call makes n calls on one connection (keep-alive) and returns the last response.
	call := func(t *testing.T, addr string, cfg *tls.Config, n int) (resp *frResp, err error) {
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		for i := range n {
			if _, err := c.Write(frSoapRequest("soap.internal", "/svc", false, smallBody)); err != nil {
				return nil, err
			}
			if resp, err = frReadResponse(br); err != nil || resp.Status != 200 {
				return resp, err
			}
			if i < n-1 {
				require.Equal(t, smallBody, <-bodies)
			}
		}
		return resp, nil
	}
	startEdge := func(t *testing.T, tlsYAML string) pairAddrs {
		a := newPairAddrs(t)
		startGateway(t, a.OriginAdmin, originYAML(a, url, ""))
		withTLS := a
		withTLS.Edge = a.Edge + "\n      tls: " + tlsYAML // the listener's own section
		startGateway(t, a.EdgeAdmin, edgeYAML(withTLS, ""))
		return a
	}

	t.Run("server certificate", func(t *testing.T) {
		a := startEdge(t, fmt.Sprintf("{cert_file: %s, key_file: %s}", edgeCert, edgeKey))
		for range 2 {
			resp, err := call(t, a.Edge, &tls.Config{RootCAs: roots, ServerName: "soap.internal"}, 3)
			require.NoError(t, err)
			require.Equal(t, 200, resp.Status, resp.String())
			require.Equal(t, answer, string(resp.Body))
			require.Equal(t, smallBody, <-bodies)
		}

		resp, err := frExchange(a.Edge, frSoapRequest("soap.internal", "/svc", false, smallBody), 10*time.Second)
		require.NoError(t, err, "a plain HTTP client got no answer")
		require.Equal(t, "bad_request", resp.Get("X-Soapgw-Error"), resp.String())
		require.Contains(t, string(resp.Body), "speaks HTTPS")
		require.Eventually(t, func() bool {
			return metricSum(t, a.EdgeAdmin, "soapgw_edge_tls_handshake_failures_total", "reason=plain_http") == 1
		}, 5*time.Second, 20*time.Millisecond)
		require.Empty(t, bodies, "a request reached the server")
	})

	t.Run("renewed certificate", func(t *testing.T) {
		// The files are written over with a certificate for another name: the next
		// client connection gets it, without a restart or a reload.
		certPath, keyPath := filepath.Join(dir, "listener.pem"), filepath.Join(dir, "listener-key.pem")
		copyFile(t, edgeCert, certPath)
		copyFile(t, edgeKey, keyPath)
		a := startEdge(t, fmt.Sprintf("{cert_file: %s, key_file: %s}", certPath, keyPath))
		renewed := &tls.Config{RootCAs: roots, ServerName: "soap2.internal"}
		_, err := call(t, a.Edge, renewed, 1)
		require.Error(t, err, "the certificate names soap.internal only")
		newCert, newKey := ca.issue(t, dir, "soap2.internal", true)
		copyFile(t, newKey, keyPath)
		copyFile(t, newCert, certPath)
		require.Eventually(t, func() bool {
			resp, err := call(t, a.Edge, renewed, 1)
			return err == nil && resp.Status == 200
		}, 20*time.Second, 200*time.Millisecond, "the renewed certificate was not served")
		require.Equal(t, smallBody, <-bodies)
	})

	t.Run("client certificates", func(t *testing.T) {
		a := startEdge(t, fmt.Sprintf("{cert_file: %s, key_file: %s, ca_file: %s}", edgeCert, edgeKey, ca.pem))
		_, err := call(t, a.Edge, &tls.Config{RootCAs: roots, ServerName: "soap.internal"}, 1)
		require.Error(t, err, "a client without a certificate called")
		require.Eventually(t, func() bool {
			return metricSum(t, a.EdgeAdmin, "soapgw_edge_tls_handshake_failures_total", "reason=refused") == 1
		}, 5*time.Second, 20*time.Millisecond)

		resp, err := call(t, a.Edge, &tls.Config{RootCAs: roots, ServerName: "soap.internal", Certificates: []tls.Certificate{clientCert}}, 1)
		require.NoError(t, err)
		require.Equal(t, 200, resp.Status, resp.String())
		require.Equal(t, answer, string(resp.Body))
		require.Equal(t, smallBody, <-bodies)
	})
}
