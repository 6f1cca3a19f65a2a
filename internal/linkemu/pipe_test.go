package linkemu

import (
	"encoding/binary"
	"math"
	"testing"
	"time"
)

// sim drives a pipe on virtual time: packets are admitted at given times
// and deliver is called at every due time, so the recorded output times are
// exactly the scheduled ones.
type sim struct {
	p   *pipe
	out []delivery
	now int64
}

type delivery struct {
	id  uint32 // first 4 payload bytes
	at  int64
	len int
}

func newSim(s Shape, seed uint64) *sim {
	m := &sim{}
	m.p = newPipe(s, seed, 1, func(b []byte) {
		m.out = append(m.out, delivery{id: binary.BigEndian.Uint32(b[28:]), at: m.now, len: len(b)})
	})
	return m
}

// advance runs the pipe until virtual time t.
func (m *sim) advance(t int64) {
	for {
		due, ok := m.p.next()
		if !ok || due > t {
			break
		}
		m.now = max(m.now, due)
		m.p.deliver(m.now, 0)
	}
	m.now = t
}

// send admits a UDP packet of size bytes carrying id at virtual time t.
func (m *sim) send(t int64, id uint32, size int) {
	m.advance(t)
	pk := getPacket()
	pk.n = copy(pk.buf[:], udpPacket(size))
	binary.BigEndian.PutUint32(pk.buf[28:], id)
	m.p.admit(pk, t)
}

func (m *sim) finish() { m.advance(math.MaxInt64 / 2) }

// ipv4 builds an IPv4 packet with proto and transport bytes l4, padded to
// total length size.
func ipv4(proto byte, l4 []byte, size int) []byte {
	size = max(size, 20+len(l4))
	b := make([]byte, size)
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(size))
	b[8] = 64
	b[9] = proto
	copy(b[12:], []byte{10, 213, 0, 1, 10, 213, 0, 2})
	copy(b[20:], l4)
	return b
}

func udpPacket(size int) []byte { return ipv4(17, make([]byte, 8), max(size, 32)) }

func tcpPacket(payload int) []byte {
	h := make([]byte, 32) // 20-byte header + 12 bytes of options
	h[12] = 8 << 4        // data offset 8 words
	h[13] = 0x10          // ACK
	return ipv4(6, h, 20+32+payload)
}

func TestClassify(t *testing.T) {
	frag := udpPacket(100)
	frag[9] = 6
	binary.BigEndian.PutUint16(frag[6:], 0x0010) // offset 128 bytes
	truncated := tcpPacket(0)[:30]
	binary.BigEndian.PutUint16(truncated[2:], 30)
	v6 := make([]byte, 60)
	v6[0] = 0x60
	for _, c := range []struct {
		name string
		pkt  []byte
		want class
	}{
		{"pure ack", tcpPacket(0), classPureTCP},
		{"tcp data", tcpPacket(1), classTCPData},
		{"tcp full", tcpPacket(1448), classTCPData},
		{"udp", udpPacket(60), classUDP},
		{"icmp", ipv4(1, make([]byte, 8), 84), classOther},
		{"ipv6", v6, classOther},
		{"tcp fragment", frag, classTCPData},
		{"truncated tcp", truncated, classOther},
		{"short", []byte{0x45, 0}, classOther},
		{"empty", nil, classOther},
	} {
		if got := classify(c.pkt); got != c.want {
			t.Errorf("%s: classify = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestPipePerfect(t *testing.T) {
	m := newSim(Shape{}, 1)
	for i := range 100 {
		m.send(int64(i)*1000, uint32(i), 100)
		if len(m.out) != i+1 || m.out[i].at != int64(i)*1000 {
			t.Fatalf("packet %d not delivered at once: %v", i, m.out)
		}
	}
	if len(m.p.q) != 0 {
		t.Fatal("perfect link used the heap")
	}
}

func TestPipeDelayJitterFIFO(t *testing.T) {
	const delay, jitter = int64(10 * time.Millisecond), int64(5 * time.Millisecond)
	m := newSim(Shape{Delay: time.Duration(delay), Jitter: time.Duration(jitter)}, 7)
	const n = 20000
	sendAt := make([]int64, n)
	for i := range n {
		sendAt[i] = int64(i) * 50_000 // 20 000 packets/s
		m.send(sendAt[i], uint32(i), 100)
	}
	m.finish()
	if len(m.out) != n {
		t.Fatalf("delivered %d of %d", len(m.out), n)
	}
	var sum float64
	for i, d := range m.out {
		if d.id != uint32(i) {
			t.Fatalf("delivery %d is packet %d: jitter reordered", i, d.id)
		}
		lat := d.at - sendAt[i]
		if lat < delay-jitter || lat > delay+jitter {
			t.Fatalf("packet %d delayed %v, outside %v ± %v", i, time.Duration(lat), time.Duration(delay), time.Duration(jitter))
		}
		sum += float64(lat)
	}
	// FIFO pushes delays up towards Delay+Jitter at this packet rate.
	t.Logf("mean delay %v at 20k packets/s", time.Duration(sum/n))

	// At a low packet rate the mean is Delay.
	m = newSim(Shape{Delay: time.Duration(delay), Jitter: time.Duration(jitter)}, 7)
	for i := range 2000 {
		m.send(int64(i)*int64(100*time.Millisecond), uint32(i), 100)
	}
	m.finish()
	sum = 0
	for i, d := range m.out {
		sum += float64(d.at - int64(i)*int64(100*time.Millisecond))
	}
	mean := sum / float64(len(m.out))
	// Uniform ±5 ms: σ of the mean of 2000 is 5ms/√3/√2000 ≈ 65 µs.
	if math.Abs(mean-float64(delay)) > 300_000 {
		t.Errorf("mean delay %v at a low rate, want %v", time.Duration(mean), time.Duration(delay))
	}
}

func TestPipeLossDeterministic(t *testing.T) {
	const n, loss = 100000, 0.1
	run := func(seed uint64) []delivery {
		m := newSim(Shape{Loss: loss}, seed)
		for i := range n {
			m.send(int64(i), uint32(i), 64)
		}
		m.finish()
		if got := m.p.st.dropped.Load() + uint64(len(m.out)); got != n {
			t.Fatalf("dropped + delivered = %d, want %d", got, n)
		}
		return m.out
	}
	a, b := run(3), run(3)
	if len(a) != len(b) {
		t.Fatalf("same seed, %d vs %d delivered", len(a), len(b))
	}
	for i := range a {
		if a[i].id != b[i].id {
			t.Fatalf("same seed, different packet lost near %d", i)
		}
	}
	dropped := float64(n - len(a))
	sigma := math.Sqrt(n * loss * (1 - loss))
	if math.Abs(dropped-n*loss) > 4.5*sigma {
		t.Errorf("dropped %v, want %v ± %.0f", dropped, n*loss, 4.5*sigma)
	}
	if c := run(4); len(c) == len(a) {
		t.Logf("seeds 3 and 4 dropped the same number (%d): possible but unlikely", n-len(a))
	}
}

func TestPipeRateAndQueue(t *testing.T) {
	const rate = 1 * Mbit
	const size = 1000 // bytes: 8 ms at 1 Mbit/s
	m := newSim(Shape{RateBps: rate, QueueBytes: 10 * size, Delay: 20 * time.Millisecond}, 1)
	// Offer 2 Mbit/s for 2 s: half must be tail-dropped.
	const n = 500
	for i := range n {
		m.send(int64(i)*4_000_000, uint32(i), size)
	}
	m.finish()
	st := m.p.st.snapshot()
	if st.QueueDrops+uint64(len(m.out)) != n {
		t.Fatalf("queue drops %d + delivered %d != %d", st.QueueDrops, len(m.out), n)
	}
	if st.QueueDropBytes != st.QueueDrops*size || st.Bytes != n*size {
		t.Fatalf("queue drop bytes %d of %d offered, want %d", st.QueueDropBytes, st.Bytes, st.QueueDrops*size)
	}
	first, last := m.out[0], m.out[len(m.out)-1]
	bits := float64((len(m.out) - 1) * size * 8)
	got := bits / (float64(last.at-first.at) / 1e9)
	if math.Abs(got-float64(rate)) > 0.01*float64(rate) {
		t.Errorf("delivered %.0f bit/s, want %d", got, rate)
	}
	// Queueing delay is bounded by the queue: 10 packets = 80 ms, plus the
	// packet's own 8 ms and the 20 ms delay.
	for _, d := range m.out {
		if lat := time.Duration(d.at - int64(d.id)*4_000_000); lat > 108*time.Millisecond+time.Microsecond {
			t.Fatalf("packet %d delayed %v, beyond queue bound", d.id, lat)
		}
	}
	t.Logf("delivered %d, tail-dropped %d, rate %.3f Mbit/s", len(m.out), st.QueueDrops, got/1e6)
	if st.QueueDrops < n/2-15 || st.QueueDrops > n/2+15 {
		t.Errorf("queue drops %d, want ≈%d", st.QueueDrops, n/2)
	}
}

func TestPipeDefaultQueue(t *testing.T) {
	m := newSim(Shape{RateBps: 1 * Mbit}, 1)
	for i := range 200 { // 200 kB at once into a 64 KiB queue
		m.send(0, uint32(i), 1000)
	}
	m.finish()
	// A packet is admitted while the unserialized bytes ahead of it plus
	// its own fit in the queue: 65 of 1000 bytes in 64 KiB.
	if got := len(m.out); got != DefaultQueueBytes/1000 {
		t.Errorf("delivered %d, want %d", got, DefaultQueueBytes/1000)
	}
}

func TestPipeDuplicateReorder(t *testing.T) {
	const n = 20000
	m := newSim(Shape{Duplicate: 0.1, Reorder: 0.05, Delay: 10 * time.Millisecond}, 9)
	for i := range n {
		m.send(int64(i)*100_000, uint32(i), 100)
	}
	m.finish()
	st := m.p.st.snapshot()
	if uint64(len(m.out)) != n+st.Duplicated {
		t.Fatalf("delivered %d, want %d + %d duplicates", len(m.out), n, st.Duplicated)
	}
	if d := float64(st.Duplicated); math.Abs(d-0.1*n) > 4.5*math.Sqrt(n*0.1*0.9) {
		t.Errorf("duplicated %v, want ≈%v", d, 0.1*n)
	}
	late := 0
	for i := 1; i < len(m.out); i++ {
		if m.out[i].id < m.out[i-1].id {
			late++
		}
	}
	if st.Reordered == 0 || late == 0 {
		t.Errorf("reordered %d, out-of-order deliveries %d, want some", st.Reordered, late)
	}
	if r := float64(st.Reordered); math.Abs(r-0.05*n) > 4.5*math.Sqrt(n*0.05*0.95) {
		t.Errorf("reordered %v, want ≈%v", r, 0.05*n)
	}
}

func TestPipeSetShape(t *testing.T) {
	m := newSim(Shape{Delay: time.Millisecond}, 1)
	m.send(0, 0, 100)
	m.p.setShape(Shape{})
	m.send(10, 1, 100) // queued behind packet 0: FIFO holds
	m.finish()
	if len(m.out) != 2 || m.out[0].id != 0 || m.out[1].at != int64(time.Millisecond) {
		t.Errorf("out %+v", m.out)
	}
	m.send(int64(2*time.Millisecond), 2, 100)
	if len(m.out) != 3 || m.out[2].at != int64(2*time.Millisecond) {
		t.Errorf("after SetShape to perfect, out %+v", m.out)
	}
}

// TestPipeNoAllocs: steady-state forwarding allocates nothing, queued or not.
func TestPipeNoAllocs(t *testing.T) {
	for _, s := range []Shape{{}, {Delay: time.Millisecond, Jitter: 100 * time.Microsecond, Loss: 0.01, RateBps: 100 * Mbit}} {
		p := newPipe(s, 1, 1, func([]byte) {})
		var now int64
		pkt := udpPacket(1000)
		step := func() {
			now += 100_000
			pk := getPacket()
			pk.n = copy(pk.buf[:], pkt)
			p.admit(pk, now)
			p.deliver(now, 0)
		}
		for range 1000 { // warm up the pool and the heap
			step()
		}
		if a := testing.AllocsPerRun(1000, step); a > 0.01 {
			t.Errorf("shape %+v: %v allocs per packet", s, a)
		}
	}
}

func TestCountersReset(t *testing.T) {
	var c counters
	c.count(tcpPacket(0))
	c.count(tcpPacket(100))
	c.count(udpPacket(50))
	s := c.snapshot()
	if s.Packets != 3 || s.PureTCPPackets != 1 || s.TCPDataPackets != 1 || s.UDPPackets != 1 ||
		s.Bytes != s.PureTCPBytes+s.TCPDataBytes+s.UDPBytes || s.PureTCPBytes != 52 {
		t.Errorf("snapshot %+v", s)
	}
	c.reset()
	if c.snapshot() != (DirStats{}) {
		t.Errorf("after reset %+v", c.snapshot())
	}
}
