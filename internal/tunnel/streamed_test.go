package tunnel

import (
	"bytes"
	"compress/flate"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

// flateCodec is a toy StreamCodec: DEFLATE, which like zstd-streaming codes a message as
// it is written and keeps nothing across messages. flip, when set, corrupts the decoded
// bytes (a checksum the decoder cannot see); garbage makes the decoder fail outright.
type flateCodec struct {
	format   uint32
	flip     bool
	garbage  bool
	failAt   int           // the encoder fails once this many bytes were written (0: never)
	released *atomic.Int32 // counts encoders released, if set
}

const flateID uint8 = 8

func (flateCodec) ID() uint8 { return flateID }

func (c flateCodec) Format() uint32 { return max(c.format, 1) }

func (c flateCodec) NewStreamEncoder(w io.Writer) (StreamEncoder, error) {
	fw, err := flate.NewWriter(w, flate.BestSpeed)
	if err != nil {
		return nil, err
	}
	return &flateEncoder{Writer: fw, failAt: c.failAt, released: c.released}, nil
}

func (c flateCodec) NewStreamDecoder(r io.Reader) (StreamDecoder, error) {
	if c.garbage {
		r = io.MultiReader(bytes.NewReader([]byte{0xff, 0xff, 0xff}), r)
	}
	return &flateDecoder{r: flate.NewReader(r), flip: c.flip}, nil
}

type flateEncoder struct {
	*flate.Writer
	failAt, n int
	released  *atomic.Int32
}

var errEncoderBroke = errors.New("toy encoder broke")

func (e *flateEncoder) Write(p []byte) (int, error) {
	e.n += len(p)
	if e.failAt > 0 && e.n >= e.failAt {
		return 0, errEncoderBroke
	}
	return e.Writer.Write(p)
}

func (e *flateEncoder) Release() {
	if e.released != nil {
		e.released.Add(1)
	}
}

type flateDecoder struct {
	r    io.ReadCloser
	flip bool
	n    int
}

func (d *flateDecoder) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	if d.flip && d.n == 0 && n > 0 {
		p[0] ^= 1
	}
	d.n += n
	return n, err
}

func (d *flateDecoder) Release() { _ = d.r.Close() }

// readOneMessage accepts one stream on s and reads its message whole; the channel gets
// how the read ended (nil: the whole message, checksum verified).
func readOneMessage(s *Session) <-chan error {
	errs := make(chan error, 1)
	go func() {
		st, err := s.AcceptStream(context.Background())
		if err != nil {
			errs <- err
			return
		}
		defer st.Close()
		_, err = io.ReadAll(st)
		errs <- err
	}()
	return errs
}

// streamedConfig is codecConfig with the flate stream codec.
func streamedConfig(node string, maxCoded int, sc StreamCodec) *Config {
	cfg := codecConfig(node, maxCoded)
	cfg.StreamCodec = sc
	return cfg
}

// Messages too large to be coded whole are coded as they stream, byte for byte, in both
// directions, however they are written; small ones are still coded whole.
func TestStreamedRoundTrip(t *testing.T) {
	const limit = 64 << 10
	testConnTypes(t, func(t *testing.T, pair connPair) {
		cm, sm := NewMetrics(nil), NewMetrics(nil)
		c, s := sessionPairMetrics(t, pair, streamedConfig("edge", limit, flateCodec{}), streamedConfig("origin", limit, flateCodec{}), cm, sm)
		echoServer(t, s)
		sizes := []int{limit + 1, 300 << 10, 3 << 20}
		for i, n := range sizes {
			for _, piece := range []int{n, 7 << 10, 1} {
				if piece == 1 && n > limit+1 {
					continue // a byte per Write: only for the smallest
				}
				msg := testMsg(n, i)
				st, err := c.OpenStream(context.Background())
				require.NoError(t, err)
				for rest := msg; len(rest) > 0; {
					k := min(piece, len(rest))
					_, err := st.Write(rest[:k])
					require.NoError(t, err)
					rest = rest[k:]
				}
				require.NoError(t, st.CloseWrite())
				got, err := io.ReadAll(st)
				require.NoError(t, err, "size %d in pieces of %d", n, piece)
				require.True(t, bytes.Equal(append([]byte("re:"), msg...), got), "size %d in pieces of %d: response differs", n, piece)
				st.mu.Lock()
				codec := st.codec
				st.mu.Unlock()
				require.Equal(t, flateID, codec, "response codec")
				require.NoError(t, st.Close())
			}
		}
		sent := messages(cm, "test", "sent", "flate")
		require.Equal(t, sent, messages(sm, "edge", "received", "flate"))
		require.Equal(t, sent, messages(sm, "edge", "sent", "flate"))
		require.Equal(t, sent, messages(cm, "test", "received", "flate"))
		require.Equal(t, float64(7), sent)
		raw := testutil.ToFloat64(cm.codecRaw.WithLabelValues("test", "sent", "flate"))
		coded := testutil.ToFloat64(cm.codecPayload.WithLabelValues("test", "sent", "flate"))
		require.Less(t, coded, raw/10, "streamed requests must be coded: %v of %v bytes", coded, raw)
		require.Zero(t, fallbacks(cm, "test", "too_large")+fallbacks(sm, "edge", "too_large"))
		require.Zero(t, messages(cm, "test", "sent", "identity"))

		// Small messages are still coded whole.
		got, codec, err := exchangeCoded(context.Background(), c, testMsg(1000, 1))
		require.NoError(t, err)
		require.Equal(t, append([]byte("re:"), testMsg(1000, 1)...), got)
		require.Equal(t, deltaID, codec)
		waitNoStreams(t, c, s)
	})
}

// A message flushed before its end is streamed coded too, and what was flushed reaches
// the reader before the message ends.
func TestStreamedFlush(t *testing.T) {
	c, s := sessionPair(t, tcpPair, streamedConfig("edge", 64<<10, flateCodec{}), streamedConfig("origin", 64<<10, flateCodec{}))
	accepted := make(chan *Stream, 1)
	go func() {
		st, err := s.AcceptStream(context.Background())
		if err == nil {
			accepted <- st
		}
	}()
	st, err := c.OpenStream(context.Background())
	require.NoError(t, err)
	defer st.Close()
	first := bytes.Repeat([]byte("<a>first</a>"), 100)
	_, err = st.Write(first)
	require.NoError(t, err)
	require.NoError(t, st.Flush())
	srv := <-accepted
	defer srv.Close()
	require.NoError(t, srv.SetReadDeadline(time.Now().Add(10*time.Second))) // held bytes fail, not hang
	buf := make([]byte, len(first))
	_, err = io.ReadFull(srv, buf)
	require.NoError(t, err, "the flushed bytes arrive before the message ends")
	require.Equal(t, first, buf)
	// Once streaming, every flush pushes what was written since, even when the encoder
	// alone holds it.
	for i := range 3 {
		more := fmt.Sprintf("<more>%d</more>", i)
		_, err = st.Write([]byte(more))
		require.NoError(t, err)
		require.NoError(t, st.Flush())
		buf := make([]byte, len(more))
		_, err = io.ReadFull(srv, buf)
		require.NoError(t, err, "flush %d", i+2)
		require.Equal(t, more, string(buf))
	}
	_, err = st.Write([]byte("<b>rest</b>"))
	require.NoError(t, err)
	require.NoError(t, st.CloseWrite())
	rest, err := io.ReadAll(srv)
	require.NoError(t, err)
	require.Equal(t, "<b>rest</b>", string(rest))
	srv.mu.Lock()
	require.Equal(t, flateID, srv.codec)
	srv.mu.Unlock()
}

// Without a stream codec both sides share (absent at the peer, or another format), large
// messages stream as identity, as before.
func TestStreamedNeedsPeerSupport(t *testing.T) {
	for _, tc := range []struct {
		name string
		peer StreamCodec
	}{
		{"absent", nil},
		{"other format", flateCodec{format: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := NewMetrics(nil)
			c, s := sessionPairMetrics(t, tcpPair, streamedConfig("edge", 64<<10, flateCodec{}), streamedConfig("origin", 64<<10, tc.peer), cm, nil)
			echoServer(t, s)
			msg := testMsg(200<<10, 3)
			got, codec, err := exchangeCoded(context.Background(), c, msg)
			require.NoError(t, err)
			require.Equal(t, append([]byte("re:"), msg...), got)
			require.Zero(t, codec)
			require.Equal(t, float64(1), fallbacks(cm, "test", "too_large"))
			require.Zero(t, messages(cm, "test", "sent", "flate"))
		})
	}
}

// A streamed message that does not decode, or decodes to other bytes than were sent, is
// never delivered as complete: the reader gets an error, the stream is reset, and the
// connection goes on serving other exchanges.
func TestStreamedDecodeFailures(t *testing.T) {
	for _, tc := range []struct {
		name  string
		codec flateCodec
		check func(t *testing.T, err error)
	}{
		{"garbage", flateCodec{garbage: true}, func(t *testing.T, err error) {
			var se *StreamError
			require.ErrorAs(t, err, &se)
			require.Equal(t, frame.CodeCodec, se.Code)
		}},
		{"wrong bytes", flateCodec{flip: true}, func(t *testing.T, err error) {
			var ce *ChecksumError
			require.ErrorAs(t, err, &ce)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := sessionPair(t, tcpPair, streamedConfig("edge", 64<<10, flateCodec{}), streamedConfig("origin", 64<<10, tc.codec))
			errs := readOneMessage(s)
			st, err := c.OpenStream(context.Background())
			require.NoError(t, err)
			_, err = st.Write(testMsg(200<<10, 4))
			require.NoError(t, err)
			_ = st.CloseWrite()
			tc.check(t, <-errs)
			_, err = io.ReadAll(st)
			require.Error(t, err, "the sender learns the message failed")
			_ = st.Close()

			// The connection still serves exchanges (coded whole, or identity).
			echoServer(t, s)
			got, _, err := exchangeCoded(context.Background(), c, testMsg(1000, 5))
			require.NoError(t, err)
			require.Equal(t, append([]byte("re:"), testMsg(1000, 5)...), got)
		})
	}
}

// Streamed frames interleave with the frames of other streams, while messages coded
// whole by a stateful codec stay contiguous and in order: no resync, every byte right.
func TestStreamedInterleavesWithCodedMessages(t *testing.T) {
	const limit = 16 << 10
	cm, sm := NewMetrics(nil), NewMetrics(nil)
	c, s := sessionPairMetrics(t, tcpPair, streamedConfig("edge", limit, flateCodec{}), streamedConfig("origin", limit, flateCodec{}), cm, sm)
	echoServer(t, s)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			for i := range 6 {
				n := 100 + g*37 + i
				if g%2 == 0 {
					n = limit + 50<<10 + g*1000 + i
				}
				msg := testMsg(n, g*10+i)
				got, _, err := exchangeCoded(context.Background(), c, msg)
				if err == nil && !bytes.Equal(append([]byte("re:"), msg...), got) {
					err = errors.New("response differs")
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Zero(t, resyncs(cm, "test")+resyncs(sm, "edge"))
	require.Equal(t, float64(48), messages(cm, "test", "sent", "flate"))
	require.Equal(t, float64(48), messages(cm, "test", "sent", "delta"))
	waitNoStreams(t, c, s)
}

// A streamed message of any size takes bounded memory at both ends: the sender codes as
// it writes, the receiver holds at most the window of coded bytes and decodes as it
// reads. 64 MiB cross with the live heap never above a few MiB more than before, and
// byte for byte (a hash of what was read against one of what was written).
func TestStreamedMessageMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 64 MiB")
	}
	c, s := sessionPair(t, tcpPair, streamedConfig("edge", 64<<10, flateCodec{}), streamedConfig("origin", 64<<10, flateCodec{}))
	const total = 64 << 20
	chunk := func(i int) []byte { // deterministic, compressible, never all in memory
		return fmt.Appendf(nil, "<row><id>%08d</id><name>customer-%d</name><total>%d.%02d</total></row>", i, i%97, i*13%10007, i%100)
	}
	type result struct {
		sum uint64
		n   int64
		err error
	}
	got := make(chan result, 1)
	go func() {
		st, err := s.AcceptStream(context.Background())
		if err != nil {
			got <- result{err: err}
			return
		}
		defer st.Close()
		h := fnv.New64a()
		n, err := io.CopyBuffer(h, st, make([]byte, 32<<10))
		got <- result{h.Sum64(), n, err}
	}()
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	base := heap()
	st, err := c.OpenStream(context.Background())
	require.NoError(t, err)
	defer st.Close()
	h := fnv.New64a()
	var buf []byte
	var sent int64
	peak := uint64(0)
	for i := 0; sent < total; i++ {
		buf = append(buf, chunk(i)...)
		if len(buf) >= 32<<10 {
			h.Write(buf)
			_, err := st.Write(buf)
			require.NoError(t, err)
			sent += int64(len(buf))
			buf = buf[:0]
			if i%20000 == 0 {
				peak = max(peak, heap())
			}
		}
	}
	h.Write(buf)
	_, err = st.Write(buf)
	require.NoError(t, err)
	sent += int64(len(buf))
	require.NoError(t, st.CloseWrite())
	r := <-got
	require.NoError(t, r.err)
	require.Equal(t, sent, r.n)
	require.Equal(t, h.Sum64(), r.sum, "the message arrived byte for byte")
	growth := int64(peak) - int64(base)
	t.Logf("%d MiB streamed; live heap at most %.1f MiB above the start", sent>>20, float64(growth)/(1<<20))
	require.Less(t, growth, int64(6<<20), "memory must not grow with the message (its coded size is larger than that too)")
}

// An encoder that fails mid-message ends that message: the write fails, every later one
// with the same error, the peer's stream is reset (never a truncated message taken for
// whole), the encoder is released at once, and the connection goes on.
func TestStreamedEncoderFailure(t *testing.T) {
	var released atomic.Int32
	c, s := sessionPair(t, tcpPair, streamedConfig("edge", 64<<10, flateCodec{failAt: 300 << 10, released: &released}), streamedConfig("origin", 64<<10, flateCodec{}))
	errs := readOneMessage(s)
	st, err := c.OpenStream(context.Background())
	require.NoError(t, err)
	defer st.Close()
	// Incompressible, so that coded frames are out before the encoder breaks: the peer
	// has the start of the message when it must learn that there is no end.
	rng := rand.New(rand.NewPCG(1, 2))
	var werr error
	for i := 0; i < 20 && werr == nil; i++ {
		chunk := make([]byte, 32<<10)
		for j := range chunk {
			chunk[j] = byte(rng.Uint32())
		}
		_, werr = st.Write(chunk)
	}
	require.ErrorIs(t, werr, errEncoderBroke)
	_, err = st.Write([]byte("more"))
	require.ErrorIs(t, err, errEncoderBroke, "later writes fail alike")
	require.ErrorIs(t, st.CloseWrite(), errEncoderBroke)
	require.Equal(t, int32(1), released.Load(), "the encoder was released")
	var se *StreamError
	require.ErrorAs(t, <-errs, &se, "the receiver sees a reset, not the end of a message")

	echoServer(t, s)
	got, _, err := exchangeCoded(context.Background(), c, testMsg(1000, 5))
	require.NoError(t, err)
	require.Equal(t, append([]byte("re:"), testMsg(1000, 5)...), got)
}
