package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// ZstdOption configures [NewZstd] and [NewZstdStream].
type ZstdOption func(*zstdConfig) error

type zstdConfig struct {
	level  zstd.EncoderLevel
	dict   []byte // zstd-format dictionary, or raw content
	window int    // zstd-stream only
}

// DefaultStreamWindow is the zstd-stream window: how much of the direction's past
// messages later ones may refer to. It is also about the memory each side keeps.
const DefaultStreamWindow = 1 << 20

// maxStreamWindow is the largest window a zstd-stream decoder accepts from its peer.
const maxStreamWindow = 8 << 20

// ZstdLevel sets the compression level on the zstd scale (1 = fastest .. 22 = best);
// the library maps it to its four encoder levels.
func ZstdLevel(level int) ZstdOption {
	return func(c *zstdConfig) error {
		if level < 1 || level > 22 {
			return fmt.Errorf("codec: invalid zstd level %d", level)
		}
		c.level = zstd.EncoderLevelFromZstd(level)
		return nil
	}
}

// ZstdDictionary sets a dictionary both sides must share: either a zstd-format
// dictionary (as written by `zstd --train`), or raw content (such as typical messages),
// which is used with dictionary id 0. A nil or empty dict means none.
func ZstdDictionary(dict []byte) ZstdOption {
	return func(c *zstdConfig) error {
		c.dict = bytes.Clone(dict)
		return nil
	}
}

// ZstdWindow sets the window of zstd-stream (a power of two, 1 KiB to 8 MiB).
// NewZstd ignores it.
func ZstdWindow(size int) ZstdOption {
	return func(c *zstdConfig) error {
		if size < zstd.MinWindowSize || size > maxStreamWindow || size&(size-1) != 0 {
			return fmt.Errorf("codec: invalid zstd window %d", size)
		}
		c.window = size
		return nil
	}
}

func newZstdConfig(opts []ZstdOption) (*zstdConfig, error) {
	c := &zstdConfig{level: zstd.SpeedDefault, window: DefaultStreamWindow}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	// Validate the dictionary now, not at the first connection.
	if len(c.dict) > 0 {
		e, err := zstd.NewWriter(nil, c.encoderOptions()...)
		if err != nil {
			return nil, fmt.Errorf("codec: zstd dictionary: %w", err)
		}
		e.Close()
	}
	return c, nil
}

var zstdDictMagic = []byte{0x37, 0xa4, 0x30, 0xec}

func (c *zstdConfig) encoderOptions() []zstd.EOption {
	o := []zstd.EOption{
		zstd.WithEncoderLevel(c.level),
		zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false), // the tunnel checks a CRC-32C of every decoded message
		// Entropy-code literals even in blocks without matches: below zstd's better level
		// such a block goes raw, and a binary attachment inline as base64 (6 bits of 8)
		// would cross at 100 % instead of 75 %.
		zstd.WithAllLitEntropyCompression(true),
	}
	switch {
	case len(c.dict) == 0:
	case bytes.HasPrefix(c.dict, zstdDictMagic):
		o = append(o, zstd.WithEncoderDict(c.dict))
	default:
		o = append(o, zstd.WithEncoderDictRaw(0, c.dict))
	}
	return o
}

func (c *zstdConfig) decoderOptions(maxMemory, maxWindow uint64) []zstd.DOption {
	o := []zstd.DOption{
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxMemory(maxMemory),
		zstd.WithDecoderMaxWindow(maxWindow),
	}
	switch {
	case len(c.dict) == 0:
	case bytes.HasPrefix(c.dict, zstdDictMagic):
		o = append(o, zstd.WithDecoderDicts(c.dict))
	default:
		o = append(o, zstd.WithDecoderDictRaw(0, c.dict))
	}
	return o
}

func zstdErr(err error) error {
	if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
		return ErrTooLarge
	}
	return fmt.Errorf("%w: zstd: %v", ErrCorrupt, err)
}

// ---- zstd: one frame per message ----

// NewZstd returns the zstd codec: every message is one self-contained zstd frame.
// format is 1 without a dictionary, else a CRC-32C of the dictionary: both sides must
// hold the same one (frames name a zstd-format dictionary by its id, and raw content is
// always id 0, so two different raw dictionaries would otherwise decode to garbage).
func (c *zstdConfig) format() uint32 {
	if len(c.dict) == 0 {
		return 1
	}
	return crc32.Checksum(c.dict, crc32.MakeTable(crc32.Castagnoli)) | 2
}

func NewZstd(opts ...ZstdOption) (Codec, error) {
	c, err := newZstdConfig(opts)
	if err != nil {
		return nil, err
	}
	return &zstdCodec{c: c}, nil
}

// zstdCodec's encoders share one zstd.Encoder. A message is a frame of its own, so an
// encoder keeps nothing between messages, and the library's EncodeAll runs concurrently
// on block encoders of its own (at most sharedEncoders at once; more wait their turn, a
// few microseconds for a SOAP message). One block encoder with the SOAP dictionary holds
// about 11 MiB: made per encoder, that was 11 MiB per tunnel connection with zstd, and on
// the UDP tunnel (zstd is the token codec's stateless fallback there, pooled per
// connection) 11 MiB per message coded at the same moment: 16 clients took the origin's
// heap from 10 to 112 MB.
type zstdCodec struct {
	c *zstdConfig

	once   sync.Once
	shared *zstd.Encoder
	err    error
}

// zstdMessageWindow is the window of the zstd codec's encoders: the default largest
// coded message (codecs.max_coded_message). A larger message is still coded whole; its
// matches reach back this far.
const zstdMessageWindow = 1 << 20

// sharedEncoders bounds the block encoders of a zstd codec: the memory of the codec's
// encoders of a process, whatever its connections and concurrency.
func sharedEncoders() int { return min(runtime.GOMAXPROCS(0), 4) }

func (z *zstdCodec) ID() ID         { return Zstd }
func (z *zstdCodec) Name() string   { return Zstd.String() }
func (z *zstdCodec) Format() uint32 { return z.c.format() }

func (z *zstdCodec) NewEncoder() (Encoder, error) {
	z.once.Do(func() {
		// The option given last wins: concurrency replaces encoderOptions' 1.
		// A window of the largest coded message by default: frames of messages up to
		// it are the same as with the library's 8 MiB, at 4 MiB per block encoder
		// instead of 11.
		z.shared, z.err = zstd.NewWriter(nil, append(z.c.encoderOptions(),
			zstd.WithEncoderConcurrency(sharedEncoders()), zstd.WithWindowSize(zstdMessageWindow))...)
	})
	if z.err != nil {
		return nil, z.err
	}
	return &zstdEncoder{z.shared}, nil
}

func (z *zstdCodec) NewDecoder(l Limits) (Decoder, error) {
	limit := l.max()
	// A single-segment frame's window is its message's size.
	d, err := zstd.NewReader(nil, z.c.decoderOptions(uint64(limit), uint64(max(limit, maxStreamWindow)))...)
	if err != nil {
		return nil, err
	}
	return &zstdDecoder{d: d, max: limit}, nil
}

type zstdEncoder struct{ e *zstd.Encoder }

func (e *zstdEncoder) Encode(dst, msg []byte) ([]byte, error) {
	start := len(dst)
	out := e.e.EncodeAll(msg, append(dst, modeCompressed))
	if len(out)-start > 1+len(msg) {
		return appendStored(out[:start], msg), nil
	}
	return out, nil
}

type zstdDecoder struct {
	d       *zstd.Decoder
	max     int
	scratch []byte
}

func (d *zstdDecoder) Decode(dst, payload []byte) ([]byte, error) {
	body, stored, err := splitMode(payload, d.max, "zstd")
	if err != nil {
		return dst, err
	}
	if stored {
		return append(dst, body...), nil
	}
	if len(body) == 0 {
		// DecodeAll accepts no frames at all; a compressed message has one.
		return dst, fmt.Errorf("%w: empty zstd frame", ErrCorrupt)
	}
	// Decode into scratch rather than dst, so that the library's size cap counts this
	// message only.
	out, err := d.d.DecodeAll(body, d.scratch[:0])
	if cap(out) <= 4*d.max/3+64<<10 { // keep a buffer of sane size for reuse
		d.scratch = out[:0]
	}
	if err != nil {
		return dst, zstdErr(err)
	}
	if len(out) > d.max {
		return dst, ErrTooLarge
	}
	return append(dst, out...), nil
}

// ---- zstd-stream: one zstd frame per direction, flushed at every message ----

// NewZstdStream returns the zstd-stream codec. An Encoder keeps one zstd stream for all
// the messages it is given and flushes it after each, so a message may refer to the
// earlier ones of its direction (up to the window); the Decoder must therefore see every
// payload, in order. A compressed payload is
//
//	1 | uvarint(decoded length) | bytes flushed for the message
//
// A stored payload (0 | message) restarts the stream on both sides. Decoders accept
// windows up to 8 MiB.
func NewZstdStream(opts ...ZstdOption) (Codec, error) {
	c, err := newZstdConfig(opts)
	if err != nil {
		return nil, err
	}
	return &zstdStreamCodec{c}, nil
}

type zstdStreamCodec struct{ c *zstdConfig }

func (z *zstdStreamCodec) ID() ID         { return ZstdStream }
func (z *zstdStreamCodec) Name() string   { return ZstdStream.String() }
func (z *zstdStreamCodec) Format() uint32 { return z.c.format() }

func (z *zstdStreamCodec) NewEncoder() (Encoder, error) {
	s := &zstdStreamEncoder{}
	o := append(z.c.encoderOptions(), zstd.WithWindowSize(z.c.window))
	e, err := zstd.NewWriter(&s.out, o...)
	if err != nil {
		return nil, err
	}
	s.e = e
	return s, nil
}

func (z *zstdStreamCodec) NewDecoder(l Limits) (Decoder, error) {
	s := &zstdStreamDecoder{max: l.max()}
	// MaxMemory caps the window when streaming; messages are capped by their length prefix.
	d, err := zstd.NewReader(&s.in, z.c.decoderOptions(maxStreamWindow, maxStreamWindow)...)
	if err != nil {
		return nil, err
	}
	s.d = d
	return s, nil
}

type zstdStreamEncoder struct {
	e   *zstd.Encoder
	out sliceWriter
	err error
}

func (s *zstdStreamEncoder) Encode(dst, msg []byte) ([]byte, error) {
	if s.err != nil {
		return dst, s.err
	}
	start := len(dst)
	dst = append(dst, modeCompressed)
	dst = binary.AppendUvarint(dst, uint64(len(msg)))
	if len(msg) == 0 {
		return dst, nil // nothing for the stream
	}
	s.out.b = dst
	_, err := s.e.Write(msg)
	if err == nil {
		err = s.e.Flush()
	}
	out := s.out.b
	s.out.b = nil
	if err != nil {
		s.err = fmt.Errorf("codec: zstd-stream: %w", err) // the stream is lost
		return dst[:start], s.err
	}
	if len(out)-start > len(msg)+MaxExpansion {
		// Store it, and restart the stream: the decoder does the same on a stored payload.
		s.e.Reset(&s.out)
		return appendStored(out[:start], msg), nil
	}
	return out, nil
}

// reset restarts the stream (a fresh encoder without the allocation).
func (s *zstdStreamEncoder) reset() {
	s.e.Reset(&s.out)
	s.err = nil
}

type zstdStreamDecoder struct {
	d   *zstd.Decoder
	in  sliceReader
	max int
	err error
}

// reset restarts the stream (a fresh decoder without the allocation).
func (s *zstdStreamDecoder) reset() {
	s.d.Reset(&s.in)
	s.err = nil
}

func (s *zstdStreamDecoder) Decode(dst, payload []byte) ([]byte, error) {
	if s.err != nil {
		return dst, s.err
	}
	dst, err := s.decode(dst, payload)
	if err != nil {
		// Any failure desynchronizes the stream from the encoder's: fail from now on.
		s.err = err
	}
	return dst, err
}

func (s *zstdStreamDecoder) decode(dst, payload []byte) ([]byte, error) {
	body, stored, err := splitMode(payload, s.max, "zstd-stream")
	if err != nil {
		return dst, err
	}
	if stored {
		if err := s.d.Reset(&s.in); err != nil {
			return dst, zstdErr(err)
		}
		return append(dst, body...), nil
	}
	n, k := binary.Uvarint(body)
	if k <= 0 {
		return dst, fmt.Errorf("%w: zstd-stream length", ErrCorrupt)
	}
	if n > uint64(s.max) {
		return dst, ErrTooLarge
	}
	s.in.b = body[k:]
	defer func() { s.in.b = nil }()
	if n == 0 {
		if len(s.in.b) != 0 {
			return dst, fmt.Errorf("%w: zstd-stream data for an empty message", ErrCorrupt)
		}
		return dst, nil
	}
	base := len(dst)
	dst = append(dst, make([]byte, n)...) // n <= max
	if _, err := io.ReadFull(s.d, dst[base:]); err != nil {
		return dst[:base], zstdErr(err)
	}
	if len(s.in.b) != 0 {
		return dst[:base], fmt.Errorf("%w: zstd-stream message longer than its length", ErrCorrupt)
	}
	return dst, nil
}
