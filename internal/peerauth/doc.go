// Package peerauth secures and authenticates tunnel connections between soapgw gateways
// before the tunnel handshake (HELLO) runs on them. It knows nothing of the tunnel: it
// turns an accepted or dialled net.Conn into an authenticated one, or fails with an
// [Error] that names the cause.
//
// Three modes, chosen by configuration on both sides:
//
//   - Shared key: TLS 1.3 runs with a certificate the origin generates for itself, then
//     each side proves it holds the shared key with an HMAC over the TLS exporter of this
//     very connection (RFC 9266-style channel binding). The key never travels; a proof is
//     useless on any other connection (no replay); the proofs travel inside TLS, so a
//     passive observer sees nothing to guess from. Keys are 256-bit random values (soapgw
//     keygen), so even a peer that completes a TLS handshake with a wrong key cannot
//     guess the right one offline from the proof it receives.
//   - Mutual TLS: certificates signed by the operator's CA on both sides. May be combined
//     with a shared key (both checks must pass).
//   - Insecure: plaintext, no authentication. Only when the operator says so on both
//     sides; the gateway warns and exports a gauge.
//
// The proof exchange is written down in SPEC.md beside this file, with golden vectors in
// proof_test.go.
package peerauth
