// Package linkemu emulates a network link between two Linux network
// namespaces in user space, for hosts whose kernel has no tc netem. The
// benchmarks use it to reproduce the papers' LAN, WLAN, WAN and GPRS
// experiments (see [Profiles]) with real processes and real TCP stacks.
//
// [Setup] creates a client site and a server site, each a namespace with lo
// up and a TUN device, and forwards IP packets between the two devices:
//
//	client ns (Name-c)                    this process                      server ns (Name-s)
//	10.213.0.1/24                                                            10.213.0.2/24
//	app --> kernel --> lemu0 ==fd==> readLoop -> pipe "up"   -> schedLoop ==fd==> lemu0 --> kernel --> app
//	app <-- kernel <-- lemu0 <==fd== schedLoop <- pipe "down" <- readLoop <==fd== lemu0 <-- kernel <-- app
//
// The TUN devices are opened on a thread switched into each namespace
// (setns); the file descriptors then work from any goroutine. Each
// direction has a pipe (the shaping state), a reader goroutine and a
// scheduler goroutine:
//
//   - readLoop reads a packet (the runtime poller parks it while the device
//     is empty), counts it by class, and has the pipe decide its fate:
//     tail drop if the bottleneck queue is full, random loss, a delivery
//     time, duplication. A packet due now with nothing queued is written to
//     the far device at once; otherwise it goes into a heap ordered by
//     (due time, arrival).
//   - schedLoop sleeps on a timerfd armed for the heap's earliest due time,
//     and writes every due packet. One timer per direction, whatever the
//     number of packets in flight.
//
// Delivery time of a packet of n bytes arriving at t, per direction:
//
//	start = max(t, linkFree)            // bottleneck busy until linkFree
//	txEnd = start + n*8/RateBps         // serialization; linkFree = txEnd
//	due   = max(txEnd + Delay ± Jitter, previous due)
//
// so jitter never reorders (a packet is never due before its predecessor);
// only Shape.Reorder does, by sending a packet after its own serialization
// time only. The bottleneck queue is not stored: its backlog is
// linkFree - t, so tail drop compares times.
//
// Randomness comes from a PCG seeded with Options.Seed (one stream per
// direction), so a run is repeatable given the same packets.
//
// Timing: the schedulers use timerfds rather than time.Timer, whose
// millisecond-resolution netpoll wait made 50 µs timers fire 1 ms late on
// the development VM; see direction for the measurements and the lead
// compensation. The forwarder adds ≈5 µs per packet over a veth pair when
// busy (BenchmarkForwarder); after idle periods the wake-up of its reader
// adds tens of µs more, like any user-space forwarder.
//
// Running code inside a site: [Link.Command] wraps `ip netns exec`;
// [Link.DialContext], [Link.Listen] and [Link.ListenPacket] create the
// socket on a thread switched into the namespace, so a benchmark can drive
// both ends from one process.
//
// Setup needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), ip(8) and
// /dev/net/tun. Namespaces are named Options.Name+"-c" and "-s"; Setup
// removes leftovers with the same names, and [Link.Close] deletes them.
package linkemu
