package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestUpstreamMutualTLS: an https upstream signed by a private CA that requires a client
// certificate (a common enterprise SOAP service). With origin.upstreams[].tls (ca_file,
// cert_file, key_file) calls go through byte for byte, the server sees the origin's
// certificate, and a new upstream connection resumes the TLS session instead of a full
// handshake. Without the client certificate, with the system roots instead of the CA, or
// expecting another server name, the client gets a fault that names the TLS failure.
func TestUpstreamMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "svc-ca")
	srvCert, srvKey := ca.issue(t, dir, "svc.internal", true)
	cliCert, cliKey := ca.issue(t, dir, "soapgw-origin", false)

	cert, err := tls.LoadX509KeyPair(srvCert, srvKey)
	require.NoError(t, err)
	pool := ca.pool()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/xml; charset=utf-8")
		fmt.Fprintf(w, "<ok client=%q resumed=\"%t\">%d</ok>", r.TLS.PeerCertificates[0].Subject.CommonName, r.TLS.DidResume, len(body))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the point
	srv.StartTLS()
	t.Cleanup(srv.Close)

	upstream := func(tlsYAML string) string {
		// pool_size 0: every call on a new upstream connection (resumption is visible).
		return srv.URL + "\n      pool_size: 0\n      tls: " + tlsYAML
	}
	good := fmt.Sprintf("{ca_file: %s, cert_file: %s, key_file: %s, server_name: svc.internal}", ca.pem, cliCert, cliKey)
	a := newPairAddrs(t)
	startGateway(t, a.OriginAdmin, originYAML(a, upstream(good), ""))
	startGateway(t, a.EdgeAdmin, edgeYAML(a, ""))
	req := frSoapRequest("svc", "/svc", false, smallBody)
	var resumed bool
	for i := range 3 {
		resp, err := frExchange(a.Edge, req, 10*time.Second)
		require.NoError(t, err)
		require.Equal(t, 200, resp.Status, resp.String())
		body := string(resp.Body)
		require.Contains(t, body, `client="soapgw-origin"`)
		require.Contains(t, body, fmt.Sprintf(">%d</ok>", len(smallBody)))
		if i > 0 && strings.Contains(body, `resumed="true"`) {
			resumed = true
		}
	}
	require.True(t, resumed, "every upstream connection made a full TLS handshake")

	t.Run("rotated client certificate", func(t *testing.T) {
		// The files hold a certificate of another CA at first; the origin picks up the
		// right one written over them without a restart or a reload.
		other := newTestCA(t, dir, "other-ca")
		wrongCert, wrongKey := other.issue(t, dir, "stranger", false)
		certPath, keyPath := filepath.Join(dir, "rot.pem"), filepath.Join(dir, "rot-key.pem")
		copyFile(t, wrongCert, certPath)
		copyFile(t, wrongKey, keyPath)
		a := newPairAddrs(t)
		startGateway(t, a.OriginAdmin, originYAML(a, upstream(fmt.Sprintf("{ca_file: %s, cert_file: %s, key_file: %s}", ca.pem, certPath, keyPath)), ""))
		startGateway(t, a.EdgeAdmin, edgeYAML(a, ""))
		resp, err := frExchange(a.Edge, req, 10*time.Second)
		require.NoError(t, err)
		require.NotEqual(t, 200, resp.Status, "a certificate of another CA was accepted")
		copyFile(t, cliKey, keyPath)
		copyFile(t, cliCert, certPath)
		require.Eventually(t, func() bool {
			resp, err := frExchange(a.Edge, req, 10*time.Second)
			return err == nil && resp.Status == 200
		}, 20*time.Second, 200*time.Millisecond, "the rotated client certificate was not used")
	})

	for _, c := range []struct{ name, tls, want string }{
		{"no client certificate", fmt.Sprintf("{ca_file: %s}", ca.pem), "certificate required"},
		{"system roots", fmt.Sprintf("{cert_file: %s, key_file: %s}", cliCert, cliKey), "certificate signed by unknown authority"},
		{"another name", fmt.Sprintf("{ca_file: %s, cert_file: %s, key_file: %s, server_name: other.internal}", ca.pem, cliCert, cliKey), "other.internal"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newPairAddrs(t)
			startGateway(t, a.OriginAdmin, originYAML(a, upstream(c.tls), ""))
			startGateway(t, a.EdgeAdmin, edgeYAML(a, ""))
			resp, err := frExchange(a.Edge, req, 10*time.Second)
			require.NoError(t, err)
			require.NotEqual(t, 200, resp.Status)
			require.NotEmpty(t, resp.Get("X-Soapgw-Error"), resp.String())
			require.Contains(t, string(resp.Body), c.want, "the fault does not name the TLS failure")
		})
	}
}

// copyFile writes src's content over dst.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(dst, b, 0o600))
}
