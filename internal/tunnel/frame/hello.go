package frame

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// CodecIDs is a list of codec ids. It marshals as a JSON array of numbers, as SPEC.md says
// (a plain []uint8 would become a base64 string).
type CodecIDs []uint8

// MarshalJSON writes the ids as a JSON array.
func (c CodecIDs) MarshalJSON() ([]byte, error) {
	if c == nil {
		return []byte("null"), nil
	}
	b := make([]byte, 0, 2+4*len(c))
	b = append(b, '[')
	for i, id := range c {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%d", id)
	}
	return append(b, ']'), nil
}

// MaxNode bounds the node name in HELLO.
const MaxNode = 256

// Hello is the handshake each side sends as its first frame.
type Hello struct {
	Proto      int      `json:"proto"`
	Node       string   `json:"node"`
	Codecs     CodecIDs `json:"codecs"`
	MaxFrame   uint32   `json:"max_frame"`
	Window     uint32   `json:"window"`
	MaxStreams uint32   `json:"max_streams"`
	// MaxCoded is the largest message the sender accepts coded (decoded size); a peer codes
	// only messages of at most min(its own limit, this). 0: send nothing coded.
	MaxCoded uint32 `json:"max_coded"`
	// Formats holds, by codec id in decimal, the wire format of each codec the sender
	// lists: a codec is used only when both sides announce the same format (a missing
	// entry is format 0). Gateways of different releases, or with different zstd
	// dictionaries, then fall back to a codec they agree on instead of exchanging
	// payloads the other cannot decode.
	Formats map[string]uint32 `json:"formats,omitempty"`
	// Instance names the sender's process: a new one each time the gateway starts
	// (absent: the sender does not say). An edge that resumes an exchange tells the
	// origin which instance had its request, so the origin can say "I never got it"
	// only of requests sent to itself (proxy: resume.go).
	Instance string `json:"instance,omitempty"`
	// Copies, from an edge over the UDP tunnel that negotiated QUIC datagrams, says when
	// the origin sends small responses twice: "auto" while its packets are reported lost,
	// absent always (internal/tunnel/quic SPEC.md, "Copies"). Other values mean absent.
	Copies string `json:"copies,omitempty"`
	// Divert, from an edge over the UDP tunnel, is "tcp" when the edge keeps a TCP tunnel
	// to the same origin beside the UDP one (fallback tcp): the origin may then tell it to
	// collect a large response there while the UDP path loses packets (internal/tunnel/quic
	// SPEC.md, "Large responses over TCP"). Other values mean absent.
	Divert string `json:"divert,omitempty"`
	// Have, from an edge over the UDP tunnel, says it reports the responses it has read
	// whole that no ACK covers (HAVE frames, internal/tunnel/quic SPEC.md): the origin may
	// then forget their held copies at once instead of after the resume window.
	Have bool `json:"have,omitempty"`
}

// DivertTCP is HELLO's divert value of an edge that collects diverted responses over
// its TCP tunnel.
const DivertTCP = "tcp"

// MaxInstance bounds HELLO's instance.
const MaxInstance = 64

// FormatOf returns the format h announces for codec id (0 if none).
func (h Hello) FormatOf(id uint8) uint32 { return h.Formats[strconv.Itoa(int(id))] }

// MaxCodedLimit bounds HELLO's max_coded.
const MaxCodedLimit = 1 << 30

// MaxHello bounds a HELLO payload.
const MaxHello = 4096

// AppendHello appends h as a HELLO payload.
func AppendHello(dst []byte, h Hello) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(h) // a struct of plain fields cannot fail to marshal
	return append(dst, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}

// ParseHello decodes and sanity-checks a HELLO payload.
func ParseHello(b []byte) (Hello, error) {
	var h Hello
	if len(b) > MaxHello {
		return h, fmt.Errorf("%w: hello of %d bytes", ErrBadPayload, len(b))
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return h, fmt.Errorf("%w: hello: %v", ErrBadPayload, err)
	}
	if len(h.Node) > MaxNode || !utf8.ValidString(h.Node) {
		return h, fmt.Errorf("%w: hello node name is not UTF-8 of at most %d bytes", ErrBadPayload, MaxNode)
	}
	if len(h.Instance) > MaxInstance || strings.IndexFunc(h.Instance, func(r rune) bool { return r <= ' ' || r >= 0x7f }) >= 0 {
		return h, fmt.Errorf("%w: hello instance is not printable ASCII of at most %d bytes", ErrBadPayload, MaxInstance)
	}
	if h.MaxFrame < 1024 || h.MaxFrame > MaxPayload {
		return h, fmt.Errorf("%w: hello max_frame %d outside [1024, %d]", ErrBadPayload, h.MaxFrame, MaxPayload)
	}
	if h.Window < h.MaxFrame || h.Window > 1<<30 {
		return h, fmt.Errorf("%w: hello window %d outside [max_frame, 2^30]", ErrBadPayload, h.Window)
	}
	if h.MaxCoded > MaxCodedLimit {
		return h, fmt.Errorf("%w: hello max_coded %d above 2^30", ErrBadPayload, h.MaxCoded)
	}
	if h.MaxStreams == 0 {
		return h, fmt.Errorf("%w: hello max_streams 0", ErrBadPayload)
	}
	if len(h.Formats) > MaxCodecID {
		return h, fmt.Errorf("%w: hello lists %d codec formats", ErrBadPayload, len(h.Formats))
	}
	for k := range h.Formats {
		if id, err := strconv.Atoi(k); err != nil || id < 1 || id > MaxCodecID || strconv.Itoa(id) != k {
			return h, fmt.Errorf("%w: hello format key %q is not a codec id", ErrBadPayload, k)
		}
	}
	return h, nil
}
