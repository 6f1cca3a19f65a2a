package deploy

import "os"

// The configurations under deploy/ read the tunnel key from ${SOAPGW_KEY_FILE} (default:
// where each deployment mounts it) or ${SOAPGW_TUNNEL_KEY}; the tests give them the
// committed test key, as a deployment gives them its own.
func init() {
	_ = os.Setenv("SOAPGW_KEY_FILE", "../testdata/example-tunnel.key")
	_ = os.Setenv("SOAPGW_TUNNEL_KEY", "nKixSKzhh4RsndIJql94OdeHY7xbBsz6ke/Wy85ks/M=")
}
