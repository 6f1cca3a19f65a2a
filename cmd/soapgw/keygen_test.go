package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/peerauth"
)

func TestKeygenWritesAKeyOnceAndKeepsIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tunnel.key")
	code, _, stderr := runCLI(t, "keygen", "--out", path)
	require.Equal(t, exitOK, code, stderr)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	keys, err := peerauth.ParseKeys(path, data)
	require.NoError(t, err, "keygen writes what the gateways read")

	code, _, stderr = runCLI(t, "keygen", "--out", path)
	require.Equal(t, exitFailure, code, "an existing key is never overwritten")
	require.Contains(t, stderr, "file exists")

	code, _, stderr = runCLI(t, "keygen", "--out", path, "--keep-existing")
	require.Equal(t, exitOK, code, stderr)
	again, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, data, again, "--keep-existing leaves the key as it is")
	require.Len(t, keys.IDs(), 1)

	code, out, _ := runCLI(t, "keygen")
	require.Equal(t, exitOK, code)
	_, err = peerauth.ParseKeys("stdout", []byte(out))
	require.NoError(t, err)
	require.NotContains(t, string(data), strings.TrimSpace(out), "every key is new")
}

func TestKeygenTLSMakesAWorkingCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	code, _, stderr := runCLI(t, "keygen", "--tls", dir, "--origin-name", "origin.test")
	require.Equal(t, exitOK, code, stderr)
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	for _, c := range []struct {
		name, dns string
		usage     x509.ExtKeyUsage
	}{{"origin", "origin.test", x509.ExtKeyUsageServerAuth}, {"edge", "soapgw-edge", x509.ExtKeyUsageClientAuth}} {
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, c.name+".pem"), filepath.Join(dir, c.name+"-key.pem"))
		require.NoError(t, err)
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		require.NoError(t, err)
		_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: c.dns, KeyUsages: []x509.ExtKeyUsage{c.usage}})
		require.NoError(t, err, "%s certificate verifies against the CA", c.name)
		st, err := os.Stat(filepath.Join(dir, c.name+"-key.pem"))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	}
}
