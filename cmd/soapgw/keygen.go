package main

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/soapgw/soapgw/internal/peerauth"
)

// newKeygenCommand makes the credentials a pair of gateways authenticates with: a shared
// key (the default), or a small CA with an origin and an edge certificate for mutual TLS.
func newKeygenCommand(g *globalOptions) *cobra.Command {
	var out, tlsDir, originName, edgeName string
	var keepExisting bool
	cmd := &cobra.Command{
		Use:   "keygen [--out FILE] | keygen --tls DIR",
		Short: "Make a shared tunnel key (or, with --tls, a CA and certificates for mutual TLS)",
		Long: `keygen writes a new random 256-bit tunnel key in base64: give the same key to the
origin (origin.auth.key_file) and to its edges (edge.peers[].auth.key_file). With --out the
key goes to FILE (created with mode 0600, never overwritten: an existing FILE is an error,
or, with --keep-existing, left as it is); otherwise to standard output.

With --tls DIR it writes ca.pem, ca-key.pem, origin.pem, origin-key.pem, edge.pem and
edge-key.pem: a CA and two certificates it signed, for origin.tls (cert_file, key_file,
ca_file: ca.pem) and edge.peers[].tls (cert_file, key_file, ca_file: ca.pem,
server_name: the --origin-name).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tlsDir != "" {
				return writeTLSSet(tlsDir, originName, edgeName, g)
			}
			key, err := peerauth.GenerateKey()
			if err != nil {
				return err
			}
			if out == "" {
				_, err = fmt.Fprintln(g.stdout, key)
				return err
			}
			if _, err := os.Stat(out); err == nil && keepExisting {
				fmt.Fprintf(g.stderr, "%s exists; kept\n", out)
				return nil
			}
			if err := writeNew(out, []byte("# soapgw tunnel key (soapgw keygen); the first key proves this side\n"+key+"\n")); err != nil {
				return err
			}
			fmt.Fprintf(g.stderr, "wrote %s\n", out)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "", "write the key to this file (mode 0600) instead of standard output")
	cmd.Flags().BoolVar(&keepExisting, "keep-existing", false, "with --out: succeed without writing when FILE exists (for a one-shot init container)")
	cmd.Flags().StringVar(&tlsDir, "tls", "", "write a CA and origin/edge certificates for mutual TLS into this directory")
	cmd.Flags().StringVar(&originName, "origin-name", "soapgw-origin", "with --tls: the origin certificate's name (edges' tls.server_name)")
	cmd.Flags().StringVar(&edgeName, "edge-name", "soapgw-edge", "with --tls: the edge certificate's name")
	return cmd
}

// writeTLSSet writes a CA and an origin and an edge certificate signed by it.
func writeTLSSet(dir, originName, edgeName string, g *globalOptions) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	caPEM, caKeyPEM, err := peerauth.NewCertificatePEM("soapgw CA", nil, nil)
	if err != nil {
		return err
	}
	ca, err := tls.X509KeyPair(caPEM, caKeyPEM)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		return err
	}
	caKey, ok := ca.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return errors.New("CA key is not ECDSA")
	}
	files := map[string][]byte{"ca.pem": caPEM, "ca-key.pem": caKeyPEM}
	for _, c := range []struct{ file, name string }{{"origin", originName}, {"edge", edgeName}} {
		certPEM, keyPEM, err := peerauth.NewCertificatePEM(c.name, caCert, caKey)
		if err != nil {
			return err
		}
		files[c.file+".pem"], files[c.file+"-key.pem"] = certPEM, keyPEM
	}
	for _, name := range []string{"ca.pem", "ca-key.pem", "origin.pem", "origin-key.pem", "edge.pem", "edge-key.pem"} {
		if err := writeNew(filepath.Join(dir, name), files[name]); err != nil {
			return err
		}
	}
	fmt.Fprintf(g.stderr, "wrote a CA and origin/edge certificates to %s (keep ca-key.pem offline)\n", dir)
	return nil
}

// writeNew creates path with mode 0600 and data; it refuses to overwrite a file, so a
// key in use is never replaced by accident.
func writeNew(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
