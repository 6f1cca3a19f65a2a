package frame

import (
	"encoding/json"
	"fmt"
)

// Hello is the handshake each side sends as its first frame.
type Hello struct {
	Proto      int     `json:"proto"`
	Node       string  `json:"node"`
	Codecs     []uint8 `json:"codecs"`
	MaxFrame   uint32  `json:"max_frame"`
	Window     uint32  `json:"window"`
	MaxStreams uint32  `json:"max_streams"`
}

// MaxHello bounds a HELLO payload.
const MaxHello = 4096

// AppendHello appends h as a HELLO payload.
func AppendHello(dst []byte, h Hello) []byte {
	b, _ := json.Marshal(h) // a struct of plain fields cannot fail to marshal
	return append(dst, b...)
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
	if h.MaxFrame < 1024 || h.MaxFrame > MaxPayload {
		return h, fmt.Errorf("%w: hello max_frame %d outside [1024, %d]", ErrBadPayload, h.MaxFrame, MaxPayload)
	}
	if h.Window < h.MaxFrame || h.Window > 1<<30 {
		return h, fmt.Errorf("%w: hello window %d outside [max_frame, 2^30]", ErrBadPayload, h.Window)
	}
	if h.MaxStreams == 0 {
		return h, fmt.Errorf("%w: hello max_streams 0", ErrBadPayload)
	}
	return h, nil
}
