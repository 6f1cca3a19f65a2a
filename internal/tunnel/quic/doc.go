// Package quic is the UDP tunnel: the same exchanges as package tunnel, carried over QUIC
// (github.com/quic-go/quic-go) instead of multiplexed TCP connections.
//
// Why: on lossy links a TCP tunnel holds every exchange behind a lost segment (head-of-line
// blocking) and a connection dies with the edge's address. QUIC gives each exchange its own
// stream, recovers loss per stream, paces and controls congestion (RFC 9002), and keeps a
// connection across NAT rebinding. This package adds what soapgw needs on top; the wire
// format is in SPEC.md.
//
// Shape:
//
//	edge: Peer ─ maintain (dial, authenticate, HELLO) ─► conn ─► OpenStream ─► Stream (one exchange)
//	origin: Server.Serve ─► accept conn ─► authenticate, HELLO ─► AcceptStream ─► Handler(Stream)
//
//	Stream.CloseWrite ─► conn.encode: sequenced lane free? ─ yes ─► token/zstd-stream (seq n)
//	                                                       └ no ──► stateless codec or identity
//	                  ─► head + payload in one write, FIN
//	Stream.Read ─► head (ack ─► conn.onAck) ─► identity: pass through
//	                                         └ coded: read whole ─► conn.decode ─► ACK (in the next head, or control frame)
//
// Every connection has a control stream (the edge's first stream) that authenticates the
// edge (internal/peerauth's key proof over this connection's TLS exporter) and then carries
// acknowledgements. The codec state shared across messages is loss-safe: a sequenced
// message is coded only when the receiver has acknowledged every earlier one, so no message
// ever waits for another's packets (SPEC.md, "Loss-safe codec state").
//
// Ownership: Peer runs one goroutine per connection slot, Server one per connection plus one
// per exchange; each conn runs its control reader and the drains of abandoned sequenced
// messages, and Close/Shutdown wait for all of them.
package quic
