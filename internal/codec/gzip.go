package codec

import (
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
)

// GzipOption configures [NewGzip].
type GzipOption func(*gzipCodec) error

// GzipLevel sets the compression level: gzip.BestSpeed (1) to gzip.BestCompression (9),
// gzip.DefaultCompression (-1), gzip.HuffmanOnly (-2) or gzip.StatelessCompression (-3).
func GzipLevel(level int) GzipOption {
	return func(c *gzipCodec) error {
		if level < gzip.StatelessCompression || level > gzip.BestCompression || level == gzip.NoCompression {
			return fmt.Errorf("codec: invalid gzip level %d", level)
		}
		c.level = level
		return nil
	}
}

// NewGzip returns the gzip codec: every message is one self-contained gzip member.
func NewGzip(opts ...GzipOption) (Codec, error) {
	c := &gzipCodec{level: gzip.DefaultCompression}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

type gzipCodec struct{ level int }

func (c *gzipCodec) ID() ID       { return Gzip }
func (c *gzipCodec) Name() string { return Gzip.String() }

// Format is 1: RFC 1952, whatever the level.
func (c *gzipCodec) Format() uint32 { return 1 }

func (c *gzipCodec) NewEncoder() (Encoder, error) {
	e := &gzipEncoder{}
	w, err := gzip.NewWriterLevel(&e.out, c.level)
	if err != nil {
		return nil, err
	}
	e.w = w
	return e, nil
}

func (c *gzipCodec) NewDecoder(l Limits) (Decoder, error) {
	return &gzipDecoder{max: l.max()}, nil
}

type gzipEncoder struct {
	w   *gzip.Writer
	out sliceWriter
}

func (e *gzipEncoder) Encode(dst, msg []byte) ([]byte, error) {
	start := len(dst)
	e.out.b = append(dst, modeCompressed)
	e.w.Reset(&e.out)
	_, err := e.w.Write(msg)
	if err == nil {
		err = e.w.Close()
	}
	out := e.out.b
	e.out.b = nil
	if err != nil {
		return dst, err
	}
	if len(out)-start > 1+len(msg) {
		return appendStored(out[:start], msg), nil
	}
	return out, nil
}

type gzipDecoder struct {
	max int
	in  sliceReader
	r   *gzip.Reader
}

func (d *gzipDecoder) Decode(dst, payload []byte) ([]byte, error) {
	body, stored, err := splitMode(payload, d.max, "gzip")
	if err != nil {
		return dst, err
	}
	if stored {
		return append(dst, body...), nil
	}
	d.in.b = body
	defer func() { d.in.b = nil }()
	if d.r == nil {
		d.r, err = gzip.NewReader(&d.in)
	} else {
		err = d.r.Reset(&d.in)
	}
	if err != nil {
		return dst, fmt.Errorf("%w: gzip: %v", ErrCorrupt, err)
	}
	d.r.Multistream(false)
	dst, err = readLimited(dst, d.r, d.max, len(body))
	if err != nil {
		return dst, err
	}
	if len(d.in.b) != 0 {
		return dst, fmt.Errorf("%w: %d bytes after the gzip member", ErrCorrupt, len(d.in.b))
	}
	return dst, nil
}

// readLimited appends everything r yields up to io.EOF to dst, failing with ErrTooLarge
// once more than limit bytes come. hint sizes the first allocation.
func readLimited(dst []byte, r io.Reader, limit, hint int) ([]byte, error) {
	base := len(dst)
	grow := min(max(4*hint, 512), limit+1)
	for {
		got := len(dst) - base
		if got > limit {
			return dst[:base], ErrTooLarge
		}
		if len(dst) == cap(dst) {
			dst = append(dst[:cap(dst)], make([]byte, min(grow, limit+1-got))...)[:len(dst)]
			grow = max(grow, got) // roughly double each time
		}
		buf := dst[len(dst):cap(dst)]
		if room := limit + 1 - got; len(buf) > room {
			buf = buf[:room]
		}
		n, err := r.Read(buf)
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			if len(dst)-base > limit {
				return dst[:base], ErrTooLarge
			}
			return dst, nil
		}
		if err != nil {
			return dst[:base], fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
	}
}
