// Package netsim emulates a slow TCP or UDP path inside one process, so that the
// demo and the tests can show what soapgw is for (hiding round trips and
// bytes on a high-latency link) without root, tc/netem or a second machine.
//
// A [Link] is a TCP forwarder: it listens on 127.0.0.1:0 and relays every
// accepted connection to a target address, holding each chunk of bytes for
// the one-way delay before writing it on. The path of one chunk:
//
//	client --write--> [listener conn] --reader--> queue --writer--> [dialed conn] --> target
//	                                   stamp due   (FIFO,  sleep until
//	                                   time        byte-   due, then
//	                                               bounded) write
//
// and the same again in the other direction, so each forwarded connection
// owns four goroutines (a reader and a writer per direction).
//
// Why timestamps and not a sleep per chunk: the reader stamps each chunk
// with the time it is due at the far side (arrival + serialization + Delay)
// and queues it at once, so any number of chunks are "in flight" together
// and throughput is not capped at one chunk per delay. Only the writer
// sleeps, and only until the head chunk is due; order is preserved because
// due times are monotonic within a direction.
//
// Why the queue is bounded by bytes (4 MiB per direction) rather than by
// chunks: it plays the part of the TCP window. When the receiving side does
// not read, the queue fills, the reader stops reading, and the sender's
// kernel buffers fill: back-pressure reaches the sender as it would on a
// real path, and memory stays bounded. Throughput is therefore at most
// 4 MiB per round trip, far above anything the demo needs.
//
// What is emulated, and what is not:
//
//   - Delay: each direction adds [LinkConfig.Delay]; RTT = 2*Delay.
//   - Handshake (opt-in, see [LinkConfig.Handshake]): the first byte from
//     the client leaves only one RTT after the connection was accepted, and
//     the first byte from the target one Delay after, as after a TCP
//     three-way handshake. A new connection per call therefore costs two
//     RTTs for a request-response, as HTTP/1.0 does on a real path. The
//     target itself is dialed at once, so it sees the connection one Delay
//     early; only the timing of bytes is emulated.
//   - Bandwidth: each chunk occupies the wire for len/Bandwidth seconds
//     (serialization delay), and reads are cut to 1460 bytes (an Ethernet
//     MSS) so that delay is charged per segment-sized piece.
//   - Half-close: an EOF from one side is delivered, after the delay, as a
//     CloseWrite (FIN) to the other side, while the reverse direction keeps
//     flowing. When both directions have been half-closed the pair closes.
//   - Reset: a read error other than EOF (for example ECONNRESET), or a
//     failed write, aborts the pair: both sockets are closed with SO_LINGER
//     0, so the other peer sees a reset rather than a clean EOF.
//   - Not emulated: loss, reordering, jitter, congestion control, and the
//     bytes of TCP/IP headers. [LinkStats] counts payload bytes and
//     forwarded chunks (a proxy for data packets) only.
//
// Both legs set TCP_NODELAY, so the emulation adds no Nagle delay of its
// own; what the endpoints do with Nagle is theirs.
//
// A [UDPLink] is the datagram counterpart, for the UDP (QUIC) tunnel: a relay
// on 127.0.0.1:0 that gives each client address its own socket towards the
// target (as a NAT would) and shapes every datagram on its own, since a
// datagram path can lose what a TCP relay cannot:
//
//	client --> [down socket] --reader--> admit ---> FIFO --scheduler--> [ups[client]] --> target
//	                                     drop?      (4096   sleep until
//	                                     stamp due  datagrams) due, send
//
// and back through the same sockets. admit applies, in a router's order, a
// tail drop when the backlog waiting for the wire exceeds
// [UDPLinkConfig.QueueBytes], serialization at [UDPLinkConfig.Bandwidth]
// (payload plus 28 bytes of IPv4 and UDP headers), random loss
// ([UDPLinkConfig.Loss], each direction on its own), then Delay ± Jitter.
// Jitter never reorders (a datagram is never due before the one ahead of it),
// so the FIFO stays sorted. Losses and jitter come from a seeded generator per
// direction: the same seed and datagrams give the same fates. [LinkStats]
// counts datagrams delivered and their UDP payload bytes, and Dropped.
package netsim
