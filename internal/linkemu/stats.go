package linkemu

import (
	"encoding/binary"
	"sync/atomic"
)

// DirStats counts the traffic of one direction since Setup or ResetStats.
//
// Packets and Bytes count every packet the sender offered to the link,
// including those then lost or tail-dropped; Bytes are IP bytes (IP header
// included), as the papers count them. The class counters split the same
// packets: PureTCP are TCP segments without payload (SYN, pure ACK, FIN,
// RST), TCPData those with payload, UDP, and Other (ICMP, IPv6, anything
// unparsable); their Packets add up to Packets.
//
// Dropped counts random losses (Shape.Loss), QueueDrops tail drops at the
// bottleneck (and drops because the emulator's own queue was full), and
// QueueDropBytes their IP bytes: those never took the bottleneck's time (a
// random loss did: it happens on the link, after serialization),
// Duplicated the extra copies delivered, Reordered the packets that
// overtook at least one packet in flight. The receiver therefore got
// Packets - Dropped - QueueDrops + Duplicated packets.
type DirStats struct {
	Packets, Bytes                 uint64
	PureTCPPackets, PureTCPBytes   uint64
	TCPDataPackets, TCPDataBytes   uint64
	UDPPackets, UDPBytes           uint64
	OtherPackets, OtherBytes       uint64
	Dropped, Duplicated, Reordered uint64
	QueueDrops, QueueDropBytes     uint64
}

// Stats is a snapshot of both directions; Up is client to server.
type Stats struct{ Up, Down DirStats }

// counters is the live, atomic form of DirStats.
type counters struct {
	packets, bytes                 atomic.Uint64
	pureTCPPackets, pureTCPBytes   atomic.Uint64
	tcpDataPackets, tcpDataBytes   atomic.Uint64
	udpPackets, udpBytes           atomic.Uint64
	otherPackets, otherBytes       atomic.Uint64
	dropped, duplicated, reordered atomic.Uint64
	queueDrops, queueDropBytes     atomic.Uint64
}

func (c *counters) snapshot() DirStats {
	return DirStats{
		Packets: c.packets.Load(), Bytes: c.bytes.Load(),
		PureTCPPackets: c.pureTCPPackets.Load(), PureTCPBytes: c.pureTCPBytes.Load(),
		TCPDataPackets: c.tcpDataPackets.Load(), TCPDataBytes: c.tcpDataBytes.Load(),
		UDPPackets: c.udpPackets.Load(), UDPBytes: c.udpBytes.Load(),
		OtherPackets: c.otherPackets.Load(), OtherBytes: c.otherBytes.Load(),
		Dropped: c.dropped.Load(), Duplicated: c.duplicated.Load(), Reordered: c.reordered.Load(),
		QueueDrops: c.queueDrops.Load(), QueueDropBytes: c.queueDropBytes.Load(),
	}
}

func (c *counters) reset() {
	for _, v := range []*atomic.Uint64{
		&c.packets, &c.bytes, &c.pureTCPPackets, &c.pureTCPBytes, &c.tcpDataPackets, &c.tcpDataBytes,
		&c.udpPackets, &c.udpBytes, &c.otherPackets, &c.otherBytes,
		&c.dropped, &c.duplicated, &c.reordered, &c.queueDrops, &c.queueDropBytes,
	} {
		v.Store(0)
	}
}

// queueDrop counts a tail-dropped packet of n bytes.
func (c *counters) queueDrop(n int) {
	c.queueDrops.Add(1)
	c.queueDropBytes.Add(uint64(n))
}

// count classifies one IP packet and adds it to the counters.
func (c *counters) count(pkt []byte) {
	n := uint64(len(pkt))
	c.packets.Add(1)
	c.bytes.Add(n)
	switch classify(pkt) {
	case classPureTCP:
		c.pureTCPPackets.Add(1)
		c.pureTCPBytes.Add(n)
	case classTCPData:
		c.tcpDataPackets.Add(1)
		c.tcpDataBytes.Add(n)
	case classUDP:
		c.udpPackets.Add(1)
		c.udpBytes.Add(n)
	default:
		c.otherPackets.Add(1)
		c.otherBytes.Add(n)
	}
}

type class uint8

const (
	classOther class = iota
	classPureTCP
	classTCPData
	classUDP
)

// classify looks at an IP packet as read from the TUN device. Only IPv4 is
// parsed; IPv6 (disabled in the namespaces anyway) counts as other.
func classify(b []byte) class {
	if len(b) < 20 || b[0]>>4 != 4 {
		return classOther
	}
	ihl := int(b[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(b[2:4]))
	if total > len(b) {
		total = len(b)
	}
	if ihl < 20 || ihl > total {
		return classOther
	}
	frag := binary.BigEndian.Uint16(b[6:8])
	switch b[9] {
	case 6: // TCP
		// A later fragment, or a first fragment with more to come, carries
		// payload by definition.
		if frag&0x3fff != 0 {
			return classTCPData
		}
		if total < ihl+20 {
			return classOther
		}
		doff := int(b[ihl+12]>>4) * 4
		if total-ihl-doff > 0 {
			return classTCPData
		}
		return classPureTCP
	case 17:
		return classUDP
	}
	return classOther
}
