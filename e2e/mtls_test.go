package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testCA issues certificates for the mutual-TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  string // path of the CA certificate
}

func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	path := filepath.Join(dir, name+"-ca.pem")
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	return &testCA{cert: cert, key: key, pem: path}
}

// pool is a certificate pool holding the CA, for a Go TLS client or server in a test.
func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// issue writes a certificate and key for name (a server certificate when server is set,
// with 127.0.0.1 as an IP SAN) and returns their paths.
func (ca *testCA) issue(t *testing.T, dir, name string, server bool) (certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certPath, keyPath = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	require.NoError(t, os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	return certPath, keyPath
}

// TestMutualTLSTunnel: with origin.tls (and a client CA) and edge peers[].tls, exchanges
// cross an authenticated, encrypted tunnel byte for byte; an edge without a client
// certificate, or one that does not trust the origin's CA, cannot open a tunnel and its
// clients get an origin_unreachable Fault (X-Soapgw-Status 503) that names the TLS failure.
func TestMutualTLSTunnel(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "soapgw-test")
	other := newTestCA(t, dir, "someone-else")
	srvCert, srvKey := ca.issue(t, dir, "origin.soapgw.test", true)
	cliCert, cliKey := ca.issue(t, dir, "edge.soapgw.test", false)

	srv := startRecordingServer(t, func(r *recordedRequest) []byte {
		return soapResponse(200, "OK", [][2]string{{"Content-Type", "text/xml; charset=utf-8"}}, append([]byte("<r>"), append(r.Body, "</r>"...)...))
	})
	a := newPairAddrs(t)
	startGateway(t, a.OriginAdmin, originYAML(a, srv.URL(), fmt.Sprintf(`  tls:
    cert_file: %s
    key_file: %s
    ca_file: %s
`, srvCert, srvKey, ca.pem)))

	edgeWithTLS := func(tlsBlock string) pairAddrs {
		e := a
		e.Edge, e.EdgeAdmin = freePort(t), freePort(t)
		yml := edgeYAML(e, "")
		yml = strings.Replace(yml, "      connections: 2\n", "      connections: 2\n      dial_timeout: 1s\n"+tlsBlock, 1)
		path := filepath.Join(t.TempDir(), "edge.yaml")
		require.NoError(t, os.WriteFile(path, []byte(yml), 0o600))
		startProc(t, binary, "run", "--config", path, "--log-level", "debug")
		return e
	}

	// Mutual TLS: works, byte for byte.
	good := edgeWithTLS(fmt.Sprintf(`      tls:
        ca_file: %s
        server_name: origin.soapgw.test
        cert_file: %s
        key_file: %s
`, ca.pem, cliCert, cliKey))
	(&gateway{proc: nil, admin: good.EdgeAdmin}).waitReadyAddr(t, 10*time.Second)
	req := "POST /svc HTTP/1.0\r\nHost: " + good.Edge + "\r\nContent-Type: text/xml; charset=utf-8\r\nSOAPAction: \"urn:tls\"\r\nContent-Length: 5\r\n\r\nhello"
	resp := rawExchange(t, good.Edge, []byte(req), 5*time.Second)
	require.True(t, strings.HasPrefix(string(resp), "HTTP/1.0 200 OK\r\n"), "%q", resp)
	require.Contains(t, string(resp), "\r\n\r\n<r>hello</r>")
	got := srv.Requests()
	require.Len(t, got, 1)
	require.Equal(t, strings.Replace(req, "HTTP/1.0", "HTTP/1.1", 1), string(got[0].Raw))

	for _, tc := range []struct {
		name, tls, want string
	}{
		{"no client certificate", fmt.Sprintf("      tls: {ca_file: %s, server_name: origin.soapgw.test}\n", ca.pem), "tls"},
		{"untrusted origin", fmt.Sprintf("      tls: {ca_file: %s, server_name: origin.soapgw.test, cert_file: %s, key_file: %s}\n", other.pem, cliCert, cliKey), "certificate signed by unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := edgeWithTLS(tc.tls)
			deadline := time.Now().Add(10 * time.Second)
			var resp []byte
			for time.Now().Before(deadline) {
				c, err := net.Dial("tcp", bad.Edge)
				if err == nil {
					_ = c.Close()
					resp = rawExchange(t, bad.Edge, []byte(req), 5*time.Second)
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			require.True(t, strings.HasPrefix(string(resp), "HTTP/1.0 500 "), "%q", resp)
			require.Contains(t, string(resp), "X-Soapgw-Status: 503\r\n")
			require.Contains(t, string(resp), "X-Soapgw-Error: origin_unreachable")
			require.Contains(t, string(resp), tc.want)
			code, _ := httpGet("http://" + bad.EdgeAdmin + "/readyz")
			require.Equal(t, 503, code, "an edge that cannot open its tunnel is not ready")
		})
	}
	require.Len(t, srv.Requests(), 1, "nothing got through without mutual TLS")
}
