package codec

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/soapgw/soapgw/internal/codec/xmltok"
	"github.com/soapgw/soapgw/internal/envelope"
)

// token: the synchronized token cache. A message's envelope head is coded by the head
// model (headmodel.go) against earlier heads; its body by xmltok, whose dictionaries both
// ends keep in step. Both are stateful: the tunnel feeds every message of a direction, in
// wire order, to one encoder and one decoder, and starts both afresh (a new epoch) after
// any decoding failure, so a desync is an error that costs one resend, never a corrupted
// message.
//
// Payload:
//
//	flags (1 byte) | [uvarint dictionary budget] | [coded head] | xmltok payload
//
//	flags bits 0-1: the kind of the envelope head the message starts with, coded by the
//	                head model (1 request, 2 response, 3 error); 0: no coded head, the
//	                whole message is the body. The kind rides here rather than in a byte
//	                of its own: on a link where a whole exchange is ~150 bytes, it counts.
//	flags bit 7:    the first message of an encoder announces the dictionary budget it
//	                codes with, so the decoder matches it without shared configuration.

const (
	tokenHead     = 0b11 // mask of the head kind bits
	tokenAnnounce = 1 << 7
)

// headKinds maps the flags' head kind bits to envelope kinds (index 0: no coded head).
var headKinds = [4]byte{0, envelope.KindRequest, envelope.KindResponse, envelope.KindError}

// kindBits returns the flags' head kind bits for an envelope kind (0 if unknown).
func kindBits(kind byte) byte {
	for i, k := range headKinds {
		if i > 0 && k == kind {
			return byte(i)
		}
	}
	return 0
}

// TokenFormat is the version of the token codec's wire format: the head model's and
// xmltok's coding, their static tables and every modelling decision both ends must make
// alike. Any change to them must change it (TestTokenFormatPinned fails until it does),
// so that gateways of different releases fall back to another codec instead of sending
// each other payloads that fail their checksums.
const TokenFormat = 6

// DefaultTokenDict is the token dictionary budget per connection direction.
const DefaultTokenDict = xmltok.DefaultDictBytes

// maxTokenDict is the largest budget a decoder accepts from its peer: the memory a peer
// can make us spend per connection direction.
const maxTokenDict = 64 << 20

// TokenOption configures [NewToken].
type TokenOption func(*tokenCodec) error

// TokenDictionary sets the dictionary budget (bytes) this side's encoders code with; the
// decoders take the budget the peer announces (up to 64 MiB).
func TokenDictionary(bytes int) TokenOption {
	return func(c *tokenCodec) error {
		if bytes < 4<<10 || bytes > maxTokenDict {
			return fmt.Errorf("codec: token dictionary %d bytes outside [4 KiB, 64 MiB]", bytes)
		}
		c.dict = bytes
		return nil
	}
}

// NewToken returns the token codec.
func NewToken(opts ...TokenOption) (Codec, error) {
	c := &tokenCodec{dict: DefaultTokenDict}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

type tokenCodec struct{ dict int }

func (c *tokenCodec) ID() ID         { return Token }
func (c *tokenCodec) Name() string   { return Token.String() }
func (c *tokenCodec) Format() uint32 { return TokenFormat }

func (c *tokenCodec) NewEncoder() (Encoder, error) {
	return &TokenEncoder{heads: newHeadModel(), body: xmltok.NewEncoder(xmltok.Options{DictBytes: c.dict}), dict: c.dict}, nil
}

func (c *tokenCodec) NewDecoder(l Limits) (Decoder, error) {
	return &TokenDecoder{heads: newHeadModel(), max: l.max()}, nil
}

// TokenEncoder is the token codec's encoder (exported for tests that compare both ends'
// state with Digest).
type TokenEncoder struct {
	heads     *headModel
	body      *xmltok.Encoder
	dict      int
	announced bool
}

// Encode appends the payload of msg.
func (e *TokenEncoder) Encode(dst, msg []byte) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0)
	if !e.announced {
		e.announced = true
		dst[start] |= tokenAnnounce
		dst = binary.AppendUvarint(dst, uint64(e.dict))
	}
	body := msg
	if kind, list, fixed, b, ok := e.heads.splitHead(msg); ok && kindBits(kind) != 0 {
		mark := len(dst)
		dst, _ = e.heads.encode(dst, kind, list, fixed)
		// The head's coding must not be longer than the head itself: the payload stays
		// within MaxExpansion of the message.
		if len(dst)-mark <= len(msg)-len(b) {
			dst[start] |= kindBits(kind)
			body = b
		} else {
			// The head travels inside the body; the decoder finds it there and
			// remembers it as well, so the next head has a reference. (Without a
			// reference a head codes longer than itself, so skipping the commit here
			// would keep every later head from being coded.)
			dst = dst[:mark]
		}
		e.heads.commit(kind, list, fixed)
	}
	return e.body.Encode(dst, body), nil
}

// Digest hashes the encoder's whole state.
func (e *TokenEncoder) Digest() uint64 { return e.heads.digest()*31 ^ e.body.Digest() }

// TokenDecoder is the token codec's decoder.
type TokenDecoder struct {
	heads *headModel
	body  *xmltok.Decoder
	max   int
}

// Decode appends the message of payload.
func (d *TokenDecoder) Decode(dst, payload []byte) ([]byte, error) {
	if len(payload) == 0 {
		return dst, fmt.Errorf("%w: empty token payload", ErrCorrupt)
	}
	flags, p := payload[0], payload[1:]
	if flags&^(tokenHead|tokenAnnounce) != 0 {
		return dst, fmt.Errorf("%w: token flags 0x%02x", ErrCorrupt, flags)
	}
	if flags&tokenAnnounce != 0 {
		n, k := binary.Uvarint(p)
		if k <= 0 || n < 1 || n > maxTokenDict || d.body != nil {
			return dst, fmt.Errorf("%w: token dictionary announcement", ErrCorrupt)
		}
		p = p[k:]
		d.body = xmltok.NewDecoder(xmltok.Options{DictBytes: int(n), MaxMessage: d.max})
	}
	if d.body == nil {
		return dst, fmt.Errorf("%w: token payload before the dictionary announcement", ErrCorrupt)
	}
	start := len(dst)
	if flags&tokenHead != 0 {
		kind := headKinds[flags&tokenHead]
		list, _, rest, err := d.heads.decode(p, kind, d.max)
		if err != nil {
			return dst, err
		}
		var ok bool
		if dst, ok = appendHead(dst, kind, list); !ok {
			return dst[:start], fmt.Errorf("%w: token head does not form a valid %q head", ErrCorrupt, kind)
		}
		d.heads.commit(kind, list, fixedFields(kind))
		p = rest
	}
	out, err := d.body.Decode(dst, p)
	if errors.Is(err, xmltok.ErrTooLarge) {
		return dst[:start], ErrTooLarge
	}
	if err != nil {
		return dst[:start], fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if len(out)-start > d.max {
		return dst[:start], ErrTooLarge
	}
	if flags&tokenHead == 0 {
		// A head the encoder sent inside the body is remembered as the encoder did:
		// splitHead of the same bytes gives the same answer on both ends.
		if kind, list, fixed, _, ok := d.heads.splitHead(out[start:]); ok {
			d.heads.commit(kind, list, fixed)
		}
	}
	return out, nil
}

// Digest hashes the decoder's whole state.
func (d *TokenDecoder) Digest() uint64 {
	if d.body == nil {
		return d.heads.digest() * 31
	}
	return d.heads.digest()*31 ^ d.body.Digest()
}

// reset starts the encoder afresh (benchmarks renew a pair between passes this way).
func (e *TokenEncoder) reset() {
	e.heads = newHeadModel()
	e.body = xmltok.NewEncoder(xmltok.Options{DictBytes: e.dict})
	e.announced = false
}

func (d *TokenDecoder) reset() {
	d.heads = newHeadModel()
	d.body = nil
}
