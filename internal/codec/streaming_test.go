package codec

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"
)

// largeXML is a DataSet-style response of at least n bytes: the Northwind responses of
// testdata, repeated.
func largeXML(t testing.TB, n int) []byte {
	t.Helper()
	var parts [][]byte
	for _, f := range []string{"0001-response.xml", "0003-response.xml"} {
		b, err := os.ReadFile("../../testdata/corpus/northwind/" + f)
		require.NoError(t, err)
		parts = append(parts, b)
	}
	out := []byte("<Envelope><Body><GetResponse>")
	for i := 0; len(out) < n; i++ {
		out = append(out, parts[i%len(parts)]...)
	}
	return append(out, "</GetResponse></Body></Envelope>"...)
}

func newTestStreaming(t testing.TB) *Streaming {
	t.Helper()
	s, err := NewStreaming(Options{})
	require.NoError(t, err)
	return s
}

// streamEncode codes msg written in pieces of piece bytes, with a Flush every flushEvery
// pieces (0: none).
func streamEncode(t testing.TB, s *Streaming, msg []byte, piece, flushEvery int) []byte {
	t.Helper()
	var out bytes.Buffer
	e, err := s.NewEncoder(&out)
	require.NoError(t, err)
	for i := 0; len(msg) > 0; i++ {
		k := min(piece, len(msg))
		_, err := e.Write(msg[:k])
		require.NoError(t, err)
		msg = msg[k:]
		if flushEvery > 0 && i%flushEvery == 0 {
			require.NoError(t, e.Flush())
		}
	}
	require.NoError(t, e.Close())
	e.Release()
	return out.Bytes()
}

// oneByteReader hands its bytes over one at a time, as a slow link would.
type oneByteReader struct{ b []byte }

func (r *oneByteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	p[0] = r.b[0]
	r.b = r.b[1:]
	return 1, nil
}

// Every message decodes to its bytes however it was written, flushed and delivered;
// encoders and decoders are reused between messages.
func TestStreamingRoundTrip(t *testing.T) {
	s := newTestStreaming(t)
	big := largeXML(t, 3<<20)
	for _, tc := range []struct {
		name              string
		msg               []byte
		piece, flushEvery int
		slow              bool
	}{
		{"empty", nil, 1, 0, false},
		{"one byte", []byte("x"), 1, 0, false},
		{"3 MB whole", big, len(big), 0, false},
		{"3 MB in 32 KiB writes", big, 32 << 10, 0, false},
		{"3 MB flushed every 16 KiB", big, 16 << 10, 1, false},
		{"200 KB from a slow link", big[:200<<10], 4 << 10, 5, true},
		{"binary", bytes.Repeat([]byte{0, 1, 2, 3, 250, 251}, 100000), 1 << 20, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 2 { // the second time with pooled state
				coded := streamEncode(t, s, tc.msg, tc.piece, tc.flushEvery)
				var src io.Reader = bytes.NewReader(coded)
				if tc.slow {
					src = &oneByteReader{coded}
				}
				d, err := s.NewDecoder(src)
				require.NoError(t, err)
				got, err := io.ReadAll(d)
				require.NoError(t, err)
				d.Release()
				require.True(t, bytes.Equal(tc.msg, got), "decoded message differs")
			}
		})
	}
	coded := streamEncode(t, s, big, 32<<10, 0)
	t.Logf("3 MB DataSet: %d bytes coded (%.1f%%)", len(coded), 100*float64(len(coded))/float64(len(big)))
	require.Less(t, len(coded), len(big)/8, "a large XML message is compressed")

	// A binary attachment inline as base64 (6 bits of 8 carry information).
	bin := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range bin {
		bin[i] = byte(rng.Uint32())
	}
	b64 := []byte("<Document>" + base64.StdEncoding.EncodeToString(bin) + "</Document>")
	coded = streamEncode(t, s, b64, 32<<10, 0)
	t.Logf("1 MB of base64: %d bytes coded (%.1f%%)", len(coded), 100*float64(len(coded))/float64(len(b64)))
	require.Less(t, len(coded), len(b64)*80/100, "base64 is entropy-coded")
}

// A decoder refuses what is not one zstd-streaming message, and a frame whose window is
// larger than MaxStreamingWindow (the memory a peer could make it spend), with errors
// that say so. (A flipped bit inside a block may decode to other bytes without an error:
// zstd's own checksum is off, the tunnel checks a CRC-32C of the decoded message.)
func TestStreamingDecodeErrors(t *testing.T) {
	s := newTestStreaming(t)
	msg := largeXML(t, 300<<10)
	coded := streamEncode(t, s, msg, len(msg), 0)

	var wide bytes.Buffer
	w, err := zstd.NewWriter(&wide, zstd.WithWindowSize(8<<20), zstd.WithSingleSegment(false))
	require.NoError(t, err)
	_, err = w.Write(largeXML(t, 9<<20))
	require.NoError(t, err)
	require.NoError(t, w.Close())

	for _, tc := range []struct {
		name    string
		payload []byte
		want    error
	}{
		{"truncated", coded[:len(coded)/2], ErrCorrupt},
		{"garbage", bytes.Repeat([]byte{0x5a}, 1000), ErrCorrupt},
		{"window too large", wide.Bytes(), ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := s.NewDecoder(bytes.NewReader(tc.payload))
			require.NoError(t, err)
			_, err = io.Copy(io.Discard, d)
			require.ErrorIs(t, err, tc.want)
			d.Release()
		})
	}
}

// A reader error (the tunnel stream reset under the decoder) comes back as an error,
// never as the end of the message.
func TestStreamingSourceError(t *testing.T) {
	s := newTestStreaming(t)
	coded := streamEncode(t, s, largeXML(t, 300<<10), 64<<10, 0)
	cut := errors.New("stream reset")
	d, err := s.NewDecoder(io.MultiReader(bytes.NewReader(coded[:len(coded)/2]), errReader{cut}))
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, d)
	require.Error(t, err)
	require.NotErrorIs(t, err, io.EOF)
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// Decoding arbitrary bytes never panics and never produces more than it is asked for.
func FuzzStreamingDecoder(f *testing.F) {
	s := newTestStreaming(f)
	f.Add(streamEncode(f, s, []byte("<a>hello</a>"), 100, 0))
	f.Add(streamEncode(f, s, largeXML(f, 100<<10), 8<<10, 1))
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd, 0x04, 0x00})
	f.Fuzz(func(t *testing.T, payload []byte) {
		d, err := s.NewDecoder(bytes.NewReader(payload))
		if err != nil {
			return
		}
		n, _ := io.Copy(io.Discard, io.LimitReader(d, 64<<20))
		_ = n
		d.Release()
	})
}

// BenchmarkStreaming codes and decodes a 3 MB DataSet response as zstd-streaming does
// (32 KiB writes, as the origin's read-ahead hands them over).
func BenchmarkStreaming(b *testing.B) {
	s := newTestStreaming(b)
	msg := largeXML(b, 3<<20)
	coded := streamEncode(b, s, msg, 32<<10, 0)
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(msg)))
		b.ReportAllocs()
		for b.Loop() {
			streamEncode(b, s, msg, 32<<10, 0)
		}
		b.ReportMetric(float64(len(coded)), "coded-bytes")
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(msg)))
		b.ReportAllocs()
		buf := make([]byte, 32<<10)
		for b.Loop() {
			d, _ := s.NewDecoder(bytes.NewReader(coded))
			for {
				if _, err := d.Read(buf); err != nil {
					break
				}
			}
			d.Release()
		}
	})
}

// At most MaxStreamingEncoders encoders are in use at once: past them NewEncoder says
// ErrStreamingBusy (the tunnel sends the message uncoded). A released encoder gives its
// slot back at once, an abandoned one when it is collected.
func TestStreamingEncodersBounded(t *testing.T) {
	s := newTestStreaming(t)
	var encs []*StreamEncoder
	for range MaxStreamingEncoders {
		e, err := s.NewEncoder(io.Discard)
		require.NoError(t, err)
		encs = append(encs, e)
	}
	_, err := s.NewEncoder(io.Discard)
	require.ErrorIs(t, err, ErrStreamingBusy)

	require.NoError(t, encs[0].Close())
	encs[0].Release()
	encs[0].Release() // twice is harmless: one slot back
	e, err := s.NewEncoder(io.Discard)
	require.NoError(t, err, "a released encoder's slot is free again")
	_, err = s.NewEncoder(io.Discard)
	require.ErrorIs(t, err, ErrStreamingBusy, "Release gave back one slot, not two")
	e.Release() // never closed: dropped, its slot back

	encs = encs[1:] // abandon one without Release
	encs[len(encs)-1] = nil
	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		if e, err := s.NewEncoder(io.Discard); err == nil {
			e.Release()
			break
		}
		require.True(t, time.Now().Before(deadline), "an abandoned encoder's slot never came back")
		runtime.Gosched() // cleanups run on their own goroutine
	}
	for _, e := range encs {
		if e != nil {
			e.Release()
		}
	}
}
