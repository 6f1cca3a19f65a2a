// Package tunnel multiplexes many SOAP exchanges over a few persistent connections between
// an edge and an origin gateway.
//
// Why: the unmodified clients soapgw sits beside open a TCP connection per call (HTTP/1.0)
// and so pay a handshake, slow start and a teardown per call; on a lossy link a lost SYN
// costs a second. The tunnel keeps a small number of connections up for good and carries
// each exchange as a stream on one of them, so an exchange costs one round trip.
//
// Shape (after hashicorp/yamux and xtaci/smux, with the wire format in package frame):
//
//	           Stream.Write ──► per-stream frames ──┐                  writer (token holder):
//	           Stream.Write ──► per-stream frames ──┼─► round-robin ─► the stream operation ─► bufio ─► conn
//	control (PING, WINDOW_UPDATE, RST, GOAWAY) ─────┘   (control first)   itself, or sendLoop
//
//	conn ─► bufio ─► recvLoop ─► CRC-32C check ─► Stream buffer ─► Stream.Read
//	                          └► PING ack, windows, RST, GOAWAY
//
// Every connection has one writer at a time, whoever holds its token (Session.writeTok):
// a stream operation (Write, Flush, CloseWrite) that queued frames writes them itself when
// the token is free, which saves a goroutine hand-off per message; otherwise sendLoop,
// woken, writes them when it gets the token. sendLoop alone writes control frames and
// backlogs and closes gracefully. One reader (recvLoop) reads, and never writes, so a
// connection whose send side stalls is still read. keepaliveLoop measures RTT. The loops
// are started by the Session constructor and stopped by Close, which is idempotent and
// waits for them. A large message is cut into frames and the writer takes one frame per
// stream in turn, so a 20 MB response never holds a 1 KB one behind it. Each stream direction has a credit window, so memory per connection is bounded
// by MaxStreams × StreamWindow whatever the peer does.
//
// Each message ends with the CRC-32C of its bytes; the receiver checks it before it releases
// the message's last bytes, so a corrupted message is never completed downstream.
//
// Messages may be coded (compressed, or tokenized by a stateful synchronized cache) with
// MessageCodecs that cmd wires in through Config; the tunnel imports no codec. A coded
// message is buffered whole, encoded by the writer and decoded by recvLoop, so both ends run a
// stateful codec over the same messages in the same order; one that cannot be decoded is
// rejected (CODEC_NACK), both ends start a fresh codec epoch and the sender resends it as
// identity from the copy it keeps until the peer acknowledges it. See codec.go and
// frame/SPEC.md.
//
// Peer keeps Connections sessions up to one remote gateway, reconnecting with jittered
// exponential backoff; Server accepts them on the origin side.
package tunnel
