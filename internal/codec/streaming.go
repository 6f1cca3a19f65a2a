package codec

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
)

// ---- zstd-streaming: one message coded as it is written ----
//
// The other codecs code a message whole: the tunnel buffers it (up to
// codecs.max_coded_message, 1 MiB by default) and codes it at its end. A larger message,
// or one the sender flushes before its end (a server streaming its answer), cannot wait
// for its end; before zstd-streaming it crossed the link uncoded. zstd-streaming codes
// such a message as it goes: one zstd frame with the built-in dictionary, blocks written
// out as they fill and at each flush, decoded at the far end as the reader reads. It
// keeps no state across messages, so its frames need no ordering with other messages and
// no acknowledgement (frame/SPEC.md "Streamed messages").
//
// Memory is bounded on both ends. An encoder takes about 1.1 MiB (zstd's fastest level,
// which on large XML compresses as well as its default level with a third of the memory:
// 5.19 against 5.28 % on a 3 MB DataSet), and at most MaxStreamingEncoders are in use at
// once per process; past them a message streams uncoded (ErrStreamingBusy). A decoder
// keeps at most MaxStreamingWindow of history, whatever the peer's frame header asks
// for; a frame asking more fails to decode.

// StreamingWindow is the window zstd-streaming encodes with: how far back a match may
// reach. SOAP messages repeat within a few KiB (rows of a DataSet, items of a list), so
// a small window loses little and keeps every large message in flight cheap.
const StreamingWindow = 256 << 10

// MaxStreamingWindow is the largest window a zstd-streaming decoder accepts.
const MaxStreamingWindow = StreamingWindow

// MaxStreamingEncoders bounds the encoders in use at once (about 70 MiB).
const MaxStreamingEncoders = 64

// ErrStreamingBusy is NewEncoder's error when MaxStreamingEncoders are in use: the
// message goes uncoded.
var ErrStreamingBusy = errors.New("codec: zstd-streaming: every encoder is in use")

// Streaming is the zstd-streaming codec (id [ZstdStreaming]). Its encoders and decoders
// are pooled: a large message costs no allocation of codec state in steady state.
type Streaming struct {
	c        *zstdConfig
	encoders sync.Pool     // *zstd.Encoder, reset
	decoders sync.Pool     // *zstd.Decoder, reset
	slots    chan struct{} // one per encoder in use (MaxStreamingEncoders)
}

// NewStreaming returns the zstd-streaming codec with o's ZstdDictionary (as for the zstd
// codec). It codes at zstd's fastest level whatever o.ZstdLevel says (see above).
func NewStreaming(o Options) (*Streaming, error) {
	o.ZstdLevel = 0
	zopts, err := o.zstdOptions()
	if err != nil {
		return nil, err
	}
	c, err := newZstdConfig(append(zopts, ZstdLevel(1)))
	if err != nil {
		return nil, err
	}
	return &Streaming{c: c, slots: make(chan struct{}, MaxStreamingEncoders)}, nil
}

// ID is ZstdStreaming.
func (s *Streaming) ID() ID { return ZstdStreaming }

// Format names the dictionary both ends must share (as the zstd codec's format does).
func (s *Streaming) Format() uint32 { return s.c.format() }

// NewEncoder returns an encoder that writes one coded message to w, or ErrStreamingBusy.
// Release gives it back; one never released gives its slot back when it is collected.
func (s *Streaming) NewEncoder(w io.Writer) (*StreamEncoder, error) {
	select {
	case s.slots <- struct{}{}:
	default:
		return nil, ErrStreamingBusy
	}
	e, ok := s.encoders.Get().(*zstd.Encoder)
	if ok {
		e.Reset(w)
	} else {
		var err error
		opts := append(s.c.encoderOptions(),
			zstd.WithWindowSize(StreamingWindow),
			zstd.WithLowerEncoderMem(true))
		if e, err = zstd.NewWriter(w, opts...); err != nil {
			<-s.slots
			return nil, fmt.Errorf("codec: zstd-streaming encoder: %w", err)
		}
	}
	se := &StreamEncoder{e: e, s: s, slot: new(atomic.Bool)}
	runtime.AddCleanup(se, func(slot *atomic.Bool) {
		if slot.CompareAndSwap(false, true) {
			<-s.slots
		}
	}, se.slot)
	return se, nil
}

// NewDecoder returns a decoder that reads one coded message from r.
func (s *Streaming) NewDecoder(r io.Reader) (*StreamDecoder, error) {
	if d, ok := s.decoders.Get().(*zstd.Decoder); ok {
		if err := d.Reset(r); err != nil {
			return nil, fmt.Errorf("codec: zstd-streaming decoder: %w", err)
		}
		return &StreamDecoder{d: d, pool: &s.decoders}, nil
	}
	opts := append(s.c.decoderOptions(MaxStreamingWindow, MaxStreamingWindow), zstd.WithDecoderLowmem(true))
	d, err := zstd.NewReader(r, opts...)
	if err != nil {
		return nil, fmt.Errorf("codec: zstd-streaming decoder: %w", err)
	}
	return &StreamDecoder{d: d, pool: &s.decoders}, nil
}

// StreamEncoder codes one message. Write and Flush may write coded bytes to the writer
// it was made with (synchronously, on the caller's goroutine); Close writes the rest.
type StreamEncoder struct {
	e      *zstd.Encoder
	s      *Streaming
	slot   *atomic.Bool // set once the encoder's slot is given back
	closed bool
}

// Write codes p.
func (e *StreamEncoder) Write(p []byte) (int, error) { return e.e.Write(p) }

// Flush writes out everything written so far, so the far end can decode it now.
func (e *StreamEncoder) Flush() error { return e.e.Flush() }

// Close ends the message.
func (e *StreamEncoder) Close() error {
	err := e.e.Close()
	e.closed = err == nil
	return err
}

// Release gives the encoder back to be reused; it must not be used after. An encoder
// that was not closed cleanly is dropped instead: its state is not worth trusting.
func (e *StreamEncoder) Release() {
	if e.e == nil {
		return
	}
	if e.closed {
		e.e.Reset(nil)
		e.s.encoders.Put(e.e)
	}
	e.e = nil
	if e.slot.CompareAndSwap(false, true) {
		<-e.s.slots
	}
}

// StreamDecoder decodes one message.
type StreamDecoder struct {
	d    *zstd.Decoder
	pool *sync.Pool
	err  error
}

// Read decodes into p. It returns io.EOF at the end of the message, and an error
// wrapping ErrCorrupt (or ErrTooLarge, for a window above MaxStreamingWindow) for a
// payload that is not one.
func (d *StreamDecoder) Read(p []byte) (int, error) {
	if d.err != nil {
		return 0, d.err
	}
	n, err := d.d.Read(p)
	switch {
	case err == nil || err == io.EOF:
	case err == io.ErrUnexpectedEOF:
		err = fmt.Errorf("%w: zstd-streaming: the message ends inside its frame", ErrCorrupt)
	default:
		// The caller tells its own source's failures (a reset stream) from these.
		err = zstdErr(err)
	}
	if err != nil {
		d.err = err
	}
	return n, err
}

// Release gives the decoder back to be reused; it must not be used after.
func (d *StreamDecoder) Release() {
	if d.d == nil {
		return
	}
	if d.err == io.EOF {
		if d.d.Reset(nil) == nil {
			d.pool.Put(d.d)
		}
	}
	d.d = nil
}
