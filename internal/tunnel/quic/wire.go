package quic

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ALPN is the application protocol both gateways negotiate in the QUIC handshake. A
// different protocol version gets a new name, so mismatched gateways fail the handshake
// with a clear "no application protocol" instead of misreading each other.
const ALPN = "soapgw-udp/1"

// Message modes (SPEC.md, "Exchange streams").
const (
	modeStateless = 0 // coded on its own: any encoder of the codec decodes it
	modeSequenced = 1 // coded with the sender's sequenced codec state, next in order
	modeFresh     = 2 // as sequenced, but from a fresh codec state
	// modeStreamed: coded as it was written by the stream codec (zstd-streaming), decoded
	// as it is read; no length, no checksum (QUIC's AEAD protects the bytes, and the
	// codec keeps no state to fall out of step).
	modeStreamed = 3
)

// flagAck marks a message head that carries an acknowledgement.
const flagAck = 0x80

// maxCodecID is the largest codec id a head can carry (7 bits; 0 is identity).
const maxCodecID = 0x7f

// maxHeadLen bounds an encoded head: 1 + 10 (ack) + 1 + 10 (seq) + 10 (len) + 4 (crc).
const maxHeadLen = 36

// head opens each direction of an exchange stream.
type head struct {
	Codec  uint8  // 0: identity, the message follows as is until the stream ends
	HasAck bool   // Ack is set
	Ack    uint64 // the sender has decoded every sequenced message up to this seq
	Mode   uint8  // for Codec != 0: modeStateless, modeSequenced, modeFresh or modeStreamed
	Seq    uint64 // sequenced modes: position in the sender's sequence (from 1)
	RawLen uint64 // for Codec != 0: the decoded size
	CRC    uint32 // sequenced modes: CRC-32C (Castagnoli) of the decoded message
}

// sequenced reports whether the message is coded with shared, ordered codec state.
func (h head) sequenced() bool {
	return h.Codec != 0 && (h.Mode == modeSequenced || h.Mode == modeFresh)
}

// streamed reports whether the message is coded as it streams (no length in the head).
func (h head) streamed() bool { return h.Codec != 0 && h.Mode == modeStreamed }

// append encodes h (SPEC.md).
func (h head) append(dst []byte) []byte {
	b := h.Codec
	if h.HasAck {
		b |= flagAck
	}
	dst = append(dst, b)
	if h.HasAck {
		dst = binary.AppendUvarint(dst, h.Ack)
	}
	if h.Codec == 0 {
		return dst
	}
	dst = append(dst, h.Mode)
	if h.streamed() {
		return dst
	}
	if h.sequenced() {
		dst = binary.AppendUvarint(dst, h.Seq)
	}
	dst = binary.AppendUvarint(dst, h.RawLen)
	if h.sequenced() {
		dst = binary.BigEndian.AppendUint32(dst, h.CRC)
	}
	return dst
}

// errShortHead means b holds only part of a head; read more and parse again.
var errShortHead = errors.New("quic tunnel: short message head")

// ErrBadHead is a message head that breaks SPEC.md.
var ErrBadHead = errors.New("quic tunnel: malformed message head")

// parseHead decodes the head at the start of b and returns it with its length. It returns
// errShortHead when b ends inside the head, and an error wrapping ErrBadHead when b can
// never start a valid head.
func parseHead(b []byte) (head, int, error) {
	var h head
	if len(b) == 0 {
		return h, 0, errShortHead
	}
	h.Codec = b[0] &^ flagAck
	h.HasAck = b[0]&flagAck != 0
	n := 1
	uvarint := func(what string) (uint64, error) {
		v, k := binary.Uvarint(b[n:])
		switch {
		case k == 0:
			return 0, errShortHead
		case k < 0:
			return 0, fmt.Errorf("%w: %s overflows 64 bits", ErrBadHead, what)
		}
		n += k
		return v, nil
	}
	var err error
	if h.HasAck {
		if h.Ack, err = uvarint("ack"); err != nil {
			return h, 0, err
		}
	}
	if h.Codec == 0 {
		return h, n, nil
	}
	if n >= len(b) {
		return h, 0, errShortHead
	}
	h.Mode = b[n]
	n++
	if h.Mode > modeStreamed {
		return h, 0, fmt.Errorf("%w: mode %d", ErrBadHead, h.Mode)
	}
	if h.streamed() {
		return h, n, nil
	}
	if h.sequenced() {
		if h.Seq, err = uvarint("seq"); err != nil {
			return h, 0, err
		}
		if h.Seq == 0 {
			return h, 0, fmt.Errorf("%w: seq 0", ErrBadHead)
		}
	}
	if h.RawLen, err = uvarint("length"); err != nil {
		return h, 0, err
	}
	if h.sequenced() {
		if len(b)-n < 4 {
			return h, 0, errShortHead
		}
		h.CRC = binary.BigEndian.Uint32(b[n:])
		n += 4
	}
	return h, n, nil
}

// Control stream frames (SPEC.md, "Control stream").
const (
	ctrlAck    = 1 // uvarint seq: sequenced messages decoded up to seq
	ctrlNack   = 2 // uvarint seq: the sequenced message seq could not be decoded
	ctrlGoAway = 3 // UTF-8 reason: no new exchanges on this connection
	ctrlWaited = 4 // uvarint ms: a sequenced message waited that long for an earlier one
	ctrlPing   = 5 // empty: the edge hears nothing while it waits for responses (nudge.go)
	// ctrlAbandon, edge only: uvarint stream id of an exchange the edge abandoned before
	// its response began (its client went away, its deadline passed). The origin stops
	// the upstream call; the edge still drains whatever response comes.
	ctrlAbandon = 6
	// ctrlReceived, both ways: uvarint count of packets the sender has received on this
	// connection so far; the peer compares it with what it sent (loss.go).
	ctrlReceived = 7
	// ctrlCarry, both ways: empty. It rides in the packet of a copy so that packet carries
	// QUIC's acknowledgement of what came since this side last sent (redundant.go,
	// "Copies carry the acknowledgements"); the receiver ignores it.
	ctrlCarry = 8
	// ctrlHave, edge to origin: uvarint stream ids, one or more: the edge has read these
	// exchanges' responses whole, which ACK does not cover (identity, stateless, streamed;
	// have.go).
	ctrlHave = 9
)

// maxCtrlPayload bounds a control frame's payload.
const maxCtrlPayload = 4096

// appendCtrl appends a control frame.
func appendCtrl(dst []byte, typ byte, payload []byte) []byte {
	dst = append(dst, typ)
	dst = binary.AppendUvarint(dst, uint64(len(payload)))
	return append(dst, payload...)
}

// readCtrl reads one control frame from r into buf (reused) and returns its type and
// payload. io.EOF means the stream ended between frames.
func readCtrl(r io.ByteReader, buf []byte) (typ byte, payload []byte, err error) {
	typ, err = r.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	l, err := binary.ReadUvarint(r)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: control frame length: %v", ErrBadHead, err)
	}
	if l > maxCtrlPayload {
		return 0, nil, fmt.Errorf("%w: control frame of %d bytes", ErrBadHead, l)
	}
	buf = buf[:0]
	for range l {
		b, err := r.ReadByte()
		if err != nil {
			return 0, nil, fmt.Errorf("%w: control frame cut short: %v", ErrBadHead, err)
		}
		buf = append(buf, b)
	}
	return typ, buf, nil
}

// parseSeq decodes an ACK or NACK payload.
func parseSeq(p []byte) (uint64, error) {
	v, k := binary.Uvarint(p)
	if k <= 0 || k != len(p) {
		return 0, fmt.Errorf("%w: bad sequence number in control frame", ErrBadHead)
	}
	return v, nil
}
