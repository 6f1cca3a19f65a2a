package tunnel

import (
	"context"
	"hash/crc32"
	"io"
	"net"
	"runtime"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

// ---- a hand-driven peer that speaks coded messages ----

// codedHello is the HELLO of a raw peer that decodes the delta codec.
func codedHello() frame.Hello {
	h := rawHello()
	h.Codecs = frame.CodecIDs{0, deltaID}
	h.Formats = map[string]uint32{strconv.Itoa(int(deltaID)): deltaCodec{}.Format()}
	h.MaxCoded = 1 << 20
	return h
}

// codedMessage appends the frames of one coded message: START (with ack if not 0) …
// END, data split every split bytes (0: one frame).
func codedMessage(dst []byte, id uint32, codec uint8, epoch, ack uint64, payload []byte, crc uint32, split int) []byte {
	if split <= 0 {
		split = len(payload) + 1
	}
	pre := frame.Preamble{Codec: codec, Epoch: epoch, Ack: ack}.Append(nil)
	for first := true; first || len(payload) > 0; first = false {
		n := min(split, len(payload))
		var p []byte
		var fl frame.Flags
		if first {
			fl |= frame.FlagStart
			p = append(p, pre...)
		}
		p = append(p, payload[:n]...)
		payload = payload[n:]
		if len(payload) == 0 {
			fl |= frame.FlagEnd
			p = frame.AppendTrailer(p, crc)
		}
		dst = appendFrame(dst, frame.TypeData, fl, id, p)
	}
	return dst
}

// rawEncoder codes messages as the raw peer's side of the delta codec.
type rawEncoder struct{ enc deltaEncoder }

func (r *rawEncoder) message(dst []byte, id uint32, epoch, ack uint64, msg []byte) []byte {
	payload, _ := r.enc.Encode(nil, msg)
	return codedMessage(dst, id, deltaID, epoch, ack, payload, crc32.Checksum(msg, castagnoli), 60<<10)
}

// frameReader reads frames from the session on the raw side, skipping PINGs.
type frameReader struct {
	t   *testing.T
	raw net.Conn
}

func (r frameReader) next() (frame.Header, []byte) {
	r.t.Helper()
	_ = r.raw.SetReadDeadline(time.Now().Add(3 * time.Second))
	for {
		h, p, err := readFrame(r.raw)
		require.NoError(r.t, err)
		if h.Type != frame.TypePing {
			return h, p
		}
	}
}

// until reads frames until one of type t and returns it.
func (r frameReader) until(t frame.Type) (frame.Header, []byte) {
	r.t.Helper()
	for {
		h, p := r.next()
		if h.Type == t {
			return h, p
		}
	}
}

// message reads the DATA frames of one message on stream id and returns its preamble and
// the payload between preamble and trailer; frames of other types or streams are kept.
func (r frameReader) message(id uint32) (frame.Preamble, []byte, uint32, []frame.Header) {
	r.t.Helper()
	var pre frame.Preamble
	var payload []byte
	var others []frame.Header
	for {
		h, p := r.next()
		if h.Type != frame.TypeData || h.StreamID != id {
			others = append(others, h)
			continue
		}
		if h.Flags.Has(frame.FlagStart) {
			var err error
			pre, p, err = frame.ParsePreamble(p)
			require.NoError(r.t, err)
		}
		if h.Flags.Has(frame.FlagEnd) {
			data, crc, err := frame.ParseTrailer(p)
			require.NoError(r.t, err)
			return pre, append(payload, data...), crc, others
		}
		payload = append(payload, p...)
	}
}

// respondingServer answers every stream with resp (after reading the request).
func respondingServer(s *Session, resp []byte, enc ...Encoding) {
	serveEach(s, func(st *Stream) {
		defer st.Close()
		if len(enc) > 0 {
			st.SetEncoding(enc[0])
		}
		if _, err := io.ReadAll(st); err != nil {
			return
		}
		_, _ = st.Write(resp)
		_ = st.CloseWrite()
	})
}

func codedRawServer(t *testing.T, scfg *Config, m *Metrics) (net.Conn, *Session, frameReader) {
	t.Helper()
	raw, conn := tcpPair(t)
	return codedRawServerOn(t, raw, conn, scfg, m)
}

// codedRawServerOn is codedRawServer on a given connection pair (net.Pipe in a synctest
// bubble, where time is fake and waits are exact).
func codedRawServerOn(t *testing.T, raw, conn net.Conn, scfg *Config, m *Metrics) (net.Conn, *Session, frameReader) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ch := make(chan *Session, 1)
	go func() {
		s, err := ServerSession(ctx, conn, scfg, m)
		if err != nil {
			t.Error(err)
		}
		ch <- s
	}()
	t.Cleanup(func() { _ = raw.Close() })
	_, err := raw.Write(helloFrame(codedHello()))
	require.NoError(t, err)
	h, _, err := readFrame(raw)
	require.NoError(t, err)
	require.Equal(t, frame.TypeHello, h.Type)
	s := <-ch
	require.NotNil(t, s)
	t.Cleanup(func() { _ = s.Close() })
	return raw, s, frameReader{t, raw}
}

// ---- acknowledgements ----

func TestCodedAckStandaloneWhenIdle(t *testing.T) {
	raw, s, r := codedRawServer(t, codecConfig("origin", 0), nil)
	go func() { // read requests, never answer: no START to carry the ack
		for {
			st, err := s.AcceptStream(context.Background())
			if err != nil {
				return
			}
			go func() { _, _ = io.ReadAll(st) }()
		}
	}()
	var enc rawEncoder
	sent := time.Now()
	_, err := raw.Write(enc.message(nil, 1, 1, 0, []byte("<one/>")))
	require.NoError(t, err)
	h, p := r.until(frame.TypeCodecAck)
	require.GreaterOrEqual(t, time.Since(sent), ackDelay/2, "a lone ack waits for a START to ride on")
	require.Equal(t, uint32(0), h.StreamID)
	n, err := frame.ParseCodecAck(p)
	require.NoError(t, err)
	require.Equal(t, uint64(1), n)

	// ackBatch messages are acknowledged at once.
	var b []byte
	for i := range ackBatch {
		b = enc.message(b, uint32(3+2*i), 1, 0, []byte("<many/>"))
	}
	_, err = raw.Write(b)
	require.NoError(t, err)
	total := uint64(0)
	for total < ackBatch {
		_, p = r.until(frame.TypeCodecAck)
		n, err := frame.ParseCodecAck(p)
		require.NoError(t, err)
		total += n
	}
	require.Equal(t, uint64(ackBatch), total)
	require.NoError(t, s.Err())
}

func TestCodedAckPiggybacksOnStart(t *testing.T) {
	raw, s, r := codedRawServer(t, codecConfig("origin", 0), nil)
	respondingServer(s, []byte("<resp/>"), nil) // identity response
	var enc rawEncoder
	var b []byte
	b = enc.message(b, 1, 1, 0, []byte("<one/>"))
	b = enc.message(b, 3, 1, 0, []byte("<two/>"))
	_, err := raw.Write(b)
	require.NoError(t, err)
	// Both responses are single frames, in whichever order the server wrote them.
	acked := uint64(0)
	for range 2 {
		h, p := r.next()
		require.Equal(t, frame.TypeData, h.Type, "the ack rides on a response's START, not in a frame of its own")
		require.Equal(t, frame.FlagStart|frame.FlagEnd, h.Flags)
		pre, rest, err := frame.ParsePreamble(p)
		require.NoError(t, err)
		data, _, err := frame.ParseTrailer(rest)
		require.NoError(t, err)
		require.Equal(t, "<resp/>", string(data))
		acked += pre.Ack
	}
	require.Equal(t, uint64(2), acked)
}

// ---- the sender side: retention, lingering, resend ----

// The sender keeps a coded message (and its stream) until the peer acknowledges it; with
// the retention budget full, new messages go identity.
func TestCodedRetentionAndLinger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := NewMetrics(nil)
		scfg := codecConfig("origin", 4096)
		scfg.CodecRetention = 4096
		rawConn, conn := net.Pipe()
		raw, s, r := codedRawServerOn(t, rawConn, conn, scfg, m)
		resp := testMsg(3000, 1)
		respondingServer(s, resp)

		_, err := raw.Write(wholeMessage(nil, 1, []byte("<req1/>")))
		require.NoError(t, err)
		pre, payload, crc, _ := r.message(1)
		require.Equal(t, deltaID, pre.Codec)
		require.Equal(t, uint64(1), pre.Epoch)
		dec := &deltaDecoder{max: 1 << 20}
		got, err := dec.Decode(nil, payload)
		require.NoError(t, err)
		require.Equal(t, resp, got)
		require.Equal(t, crc32.Checksum(resp, castagnoli), crc)

		// Both directions of stream 1 ended, but the response is not acknowledged. In the
		// bubble the sleep is exact: every timer of the session that would fire by then has.
		time.Sleep(2 * ackDelay)
		require.Equal(t, 1, s.NumStreams(), "the stream stays until its coded message is acknowledged")
		b, n := s.retainedForTest()
		require.Equal(t, 3000+retainOverhead, b)
		require.Equal(t, 1, n)
		require.Equal(t, float64(b), testutil.ToFloat64(m.retained.WithLabelValues("raw")))

		// The budget is full: the next response goes identity.
		_, err = raw.Write(wholeMessage(nil, 3, []byte("<req2/>")))
		require.NoError(t, err)
		pre, payload, _, _ = r.message(3)
		require.Equal(t, uint8(0), pre.Codec)
		require.Equal(t, resp, payload)
		require.Equal(t, 1.0, fallbacks(m, "raw", "retention_full"))

		// The ack frees the budget and lets stream 1 go; coding resumes.
		_, err = raw.Write(appendFrame(nil, frame.TypeCodecAck, 0, 0, frame.AppendCodecAck(nil, 1)))
		require.NoError(t, err)
		waitNoStreams(t, s)
		b, n = s.retainedForTest()
		require.Zero(t, b+n)
		require.Zero(t, testutil.ToFloat64(m.retained.WithLabelValues("raw")))
		_, err = raw.Write(wholeMessage(nil, 5, []byte("<req3/>")))
		require.NoError(t, err)
		pre, payload, _, _ = r.message(5)
		require.Equal(t, deltaID, pre.Codec)
		got, err = dec.Decode(nil, payload)
		require.NoError(t, err)
		require.Equal(t, resp, got)
	})
}

// A NACK makes the sender start a new epoch and resend the message as identity on the same
// stream, even though both directions had ended; the ack that covers the rejected
// message then lets the stream go.
func TestCodedNackResends(t *testing.T) {
	m := NewMetrics(nil)
	raw, s, r := codedRawServer(t, codecConfig("origin", 0), m)
	resp := testMsg(70<<10, 3) // more than one frame
	respondingServer(s, resp)
	_, err := raw.Write(wholeMessage(nil, 1, []byte("<req/>")))
	require.NoError(t, err)
	pre, _, _, _ := r.message(1)
	require.Equal(t, deltaID, pre.Codec)
	require.Eventually(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.lingering == 1 }, time.Second, time.Millisecond)

	_, err = raw.Write(appendFrame(nil, frame.TypeCodecNack, 0, 1, frame.AppendCodecNack(nil, pre.Epoch, "decode: test")))
	require.NoError(t, err)
	pre, data, crc, _ := r.message(1)
	require.Equal(t, uint8(0), pre.Codec, "resent as identity")
	require.Equal(t, resp, data)
	require.Equal(t, crc32.Checksum(resp, castagnoli), crc)
	send, _ := s.codecEpochs()
	require.Equal(t, uint64(2), send)
	require.Equal(t, 1.0, testutil.ToFloat64(m.resends.WithLabelValues("raw")))
	// Resent as identity, the message cannot be rejected again: the stream may go.
	waitNoStreams(t, s)

	// The peer's ack still counts the rejected message.
	_, err = raw.Write(appendFrame(nil, frame.TypeCodecAck, 0, 0, frame.AppendCodecAck(nil, 1)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, n := s.retainedForTest(); return n == 0 }, time.Second, time.Millisecond)
	b, _ := s.retainedForTest()
	require.Zero(t, b)

	// The next coded message is in epoch 2, from a fresh encoder.
	_, err = raw.Write(wholeMessage(nil, 3, []byte("<req/>")))
	require.NoError(t, err)
	pre, payload, _, _ := r.message(3)
	require.Equal(t, frame.Preamble{Codec: deltaID, Epoch: 2}, pre)
	got, err := (&deltaDecoder{max: 1 << 20}).Decode(nil, payload)
	require.NoError(t, err, "a fresh encoder starts at sequence 0")
	require.Equal(t, resp, got)
}

// A NACK must name the epoch the message was sent in.
func TestCodedNackWrongEpoch(t *testing.T) {
	raw, s, r := codedRawServer(t, codecConfig("origin", 0), nil)
	respondingServer(s, []byte("<resp/>"))
	_, err := raw.Write(wholeMessage(nil, 1, []byte("<req/>")))
	require.NoError(t, err)
	pre, _, _, _ := r.message(1)
	require.Equal(t, uint64(1), pre.Epoch)
	_, err = raw.Write(appendFrame(nil, frame.TypeCodecNack, 0, 1, frame.AppendCodecNack(nil, 2, "?")))
	require.NoError(t, err)
	code, reason := expectGoAway(t, raw)
	require.Equal(t, frame.CodeProtocol, code)
	require.Contains(t, reason, "names epoch 2, the message was sent in epoch 1")
	require.ErrorIs(t, waitClosed(t, s), frame.ErrBadPayload)
}

// A NACK for a stream with no message awaiting an ack resets that stream (a peer bug).
func TestCodedNackForUnknownMessage(t *testing.T) {
	m := NewMetrics(nil)
	raw, s, r := codedRawServer(t, codecConfig("origin", 0), m)
	_, err := raw.Write(dataFrame(nil, 1, true, false, []byte("<req"), 0))
	require.NoError(t, err)
	st, err := s.AcceptStream(context.Background())
	require.NoError(t, err)
	_, err = raw.Write(appendFrame(nil, frame.TypeCodecNack, 0, 1, frame.AppendCodecNack(nil, 1, "?")))
	require.NoError(t, err)
	h, p := r.until(frame.TypeRSTStream)
	require.Equal(t, uint32(1), h.StreamID)
	code, reason, err := frame.ParseRST(p)
	require.NoError(t, err)
	require.Equal(t, frame.CodeInternal, code)
	require.Contains(t, reason, "not awaiting")
	_, err = io.ReadAll(st)
	var se *StreamError
	require.ErrorAs(t, err, &se)
	require.Equal(t, 1.0, testutil.ToFloat64(m.nackErrors.WithLabelValues("raw")))
	require.NoError(t, s.Err(), "the session goes on")
	// A NACK for a stream the session never saw only counts.
	_, err = raw.Write(appendFrame(nil, frame.TypeCodecNack, 0, 77, frame.AppendCodecNack(nil, 1, "?")))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.nackErrors.WithLabelValues("raw")) == 2 }, time.Second, time.Millisecond)
	require.NoError(t, s.Err())
}

// ---- the receiver side ----

// The receiver rejects coded messages it cannot take with CODEC_NACK, restores the
// stream's window, and takes the identity resend.
func TestCodedReceiverRejects(t *testing.T) {
	tests := []struct {
		name   string
		build  func(enc *rawEncoder, msg []byte) []byte
		reason string
	}{
		{"unknown codec", func(_ *rawEncoder, msg []byte) []byte {
			return codedMessage(nil, 1, 9, 1, 0, msg, crc32.Checksum(msg, castagnoli), 60<<10)
		}, "decode"},
		{"epoch 0", func(_ *rawEncoder, msg []byte) []byte {
			var e deltaEncoder
			p, _ := e.Encode(nil, msg)
			return codedMessage(nil, 1, deltaID, 0, 0, p, crc32.Checksum(msg, castagnoli), 60<<10)
		}, "stale_epoch"},
		{"checksum", func(enc *rawEncoder, msg []byte) []byte {
			p, _ := enc.enc.Encode(nil, msg)
			return codedMessage(nil, 1, deltaID, 1, 0, p, crc32.Checksum(msg, castagnoli)^1, 60<<10)
		}, "checksum"},
		{"undecodable", func(_ *rawEncoder, msg []byte) []byte {
			return codedMessage(nil, 1, deltaID, 1, 0, []byte{0xff}, crc32.Checksum(msg, castagnoli), 0)
		}, "decode"},
		{"decodes beyond max_coded", func(_ *rawEncoder, msg []byte) []byte {
			p := []byte{0, 0xff, 0xff, 0xff, 0xff, 0x03} // sequence 0, length 2^30-1, no data
			return codedMessage(nil, 1, deltaID, 1, 0, p, crc32.Checksum(msg, castagnoli), 0)
		}, "decode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMetrics(nil)
			raw, s, r := codedRawServer(t, codecConfig("origin", 0), m)
			var enc rawEncoder
			msg := testMsg(50<<10, 7)
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			// The whole window, so the resend only fits if the window was restored.
			big := append(msg, testMsg(256<<10-len(msg)-100, 1)...)
			_, err := raw.Write(tt.build(&enc, big))
			require.NoError(t, err)
			st, err := s.AcceptStream(context.Background())
			require.NoError(t, err)
			h, p := r.until(frame.TypeCodecNack)
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<20), "no allocation for the claimed size")
			require.Equal(t, uint32(1), h.StreamID)
			epoch, why, err := frame.ParseCodecNack(p)
			require.NoError(t, err)
			t.Logf("NACK epoch %d: %s", epoch, why)
			require.Equal(t, 1.0, testutil.ToFloat64(m.resyncs.WithLabelValues("raw", tt.reason)))
			require.Zero(t, bufferedForTest(st), "nothing of a rejected message reaches the stream")

			// The resend, as identity, in frames, within the restored window.
			var b []byte
			for off := 0; off < len(big); off += 60 << 10 {
				end := min(off+60<<10, len(big))
				b = dataFrame(b, 1, off == 0, end == len(big), big[off:end], crc32.Checksum(big, castagnoli))
			}
			_, err = raw.Write(b)
			require.NoError(t, err)
			got, err := io.ReadAll(st)
			require.NoError(t, err)
			require.Equal(t, big, got)
			require.NoError(t, s.Err())
			_, p = r.until(frame.TypeCodecAck)
			n, err := frame.ParseCodecAck(p)
			require.NoError(t, err)
			require.Equal(t, uint64(1), n, "a rejected message is acknowledged too")
		})
	}
}

// Once a message of an epoch fails, every later one of that epoch is rejected, until the
// sender moves on; a message of an older epoch is rejected too.
func TestCodedReceiverBrokenAndStaleEpochs(t *testing.T) {
	m := NewMetrics(nil)
	raw, s, r := codedRawServer(t, codecConfig("origin", 0), m)
	go func() {
		for {
			st, err := s.AcceptStream(context.Background())
			if err != nil {
				return
			}
			go func() { _, _ = io.ReadAll(st) }()
		}
	}()
	var e1 rawEncoder
	var b []byte
	b = e1.message(b, 1, 1, 0, []byte("<ok/>"))
	b = codedMessage(b, 3, deltaID, 1, 0, []byte{0xff}, 0, 0) // breaks epoch 1
	b = e1.message(b, 5, 1, 0, []byte("<in-broken-epoch/>"))
	var e2 rawEncoder
	b = e2.message(b, 7, 2, 0, []byte("<epoch-2/>"))
	b = e1.message(b, 9, 1, 0, []byte("<stale/>"))
	b = e2.message(b, 11, 2, 0, []byte("<epoch-2-again/>"))
	_, err := raw.Write(b)
	require.NoError(t, err)
	var nacked []uint32
	for len(nacked) < 3 {
		h, _ := r.until(frame.TypeCodecNack)
		nacked = append(nacked, h.StreamID)
	}
	require.Equal(t, []uint32{3, 5, 9}, nacked)
	require.Equal(t, 1.0, testutil.ToFloat64(m.resyncs.WithLabelValues("raw", "decode")))
	require.Equal(t, 2.0, testutil.ToFloat64(m.resyncs.WithLabelValues("raw", "stale_epoch")))
	require.Eventually(t, func() bool { return messages(m, "raw", "received", "delta") == 3 }, time.Second, time.Millisecond)
	_, recv := s.codecEpochs()
	require.Equal(t, uint64(2), recv)
}

// Coded messages are decoded even for streams gone or refused here: the codec state must
// follow every message the peer encoded.
func TestCodedDecodedForGoneStreams(t *testing.T) {
	m := NewMetrics(nil)
	scfg := codecConfig("origin", 0)
	scfg.MaxStreams = 1
	raw, s, r := codedRawServer(t, scfg, m)
	var enc rawEncoder
	// Stream 1 stays open and unread; stream 3 is refused (limit 1); stream 1 is then
	// reset by the peer, and a late coded message for it still arrives.
	var b []byte
	b = dataFrame(b, 1, true, false, []byte("<open"), 0)
	b = enc.message(b, 3, 1, 0, []byte("<refused/>"))
	_, err := raw.Write(b)
	require.NoError(t, err)
	h, _ := r.until(frame.TypeRSTStream)
	require.Equal(t, uint32(3), h.StreamID)
	st, err := s.AcceptStream(context.Background()) // the accept queue holds MaxStreams
	require.NoError(t, err)
	require.Equal(t, uint32(1), st.ID())
	b = appendFrame(nil, frame.TypeRSTStream, 0, 1, frame.AppendRST(nil, frame.CodeCancel, ""))
	b = enc.message(b, 1, 1, 0, []byte("<late/>"))
	b = enc.message(b, 5, 1, 0, []byte("<fine/>"))
	_, err = raw.Write(b)
	require.NoError(t, err)
	st5, err := s.AcceptStream(context.Background())
	require.NoError(t, err)
	got, err := io.ReadAll(st5)
	require.NoError(t, err)
	require.Equal(t, "<fine/>", string(got), "decoded with the state the dropped messages left")
	require.Zero(t, resyncs(m, "raw"))
	require.Equal(t, 3.0, messages(m, "raw", "received", "delta"))
}

// Hostile input about codecs is a protocol error, never a panic or a corrupted message.
func TestCodedProtocolViolations(t *testing.T) {
	msg := []byte("<a/>")
	sum := crc32.Checksum(msg, castagnoli)
	var enc rawEncoder
	coded := enc.message(nil, 1, 1, 0, msg)
	cases := []struct {
		name   string
		frames []byte
		want   string
		code   frame.Code
	}{
		{"ack bit without count", appendFrame(nil, frame.TypeData, frame.FlagStart|frame.FlagEnd, 1, []byte{0x80, 0}), "preamble ack", frame.CodeProtocol},
		{"ack of zero", appendFrame(nil, frame.TypeData, frame.FlagStart|frame.FlagEnd, 1, append([]byte{0x80, 0, 0}, frame.AppendTrailer(msg, sum)...)), "ack of 0", frame.CodeProtocol},
		{"piggybacked ack beyond outstanding", appendFrame(nil, frame.TypeData, frame.FlagStart|frame.FlagEnd, 1,
			frame.AppendTrailer(append(frame.Preamble{Ack: 1}.Append(nil), msg...), sum)), "ack of 1 coded messages with 0 outstanding", frame.CodeProtocol},
		{"codec ack beyond outstanding", appendFrame(nil, frame.TypeCodecAck, 0, 0, frame.AppendCodecAck(nil, 3)), "0 outstanding", frame.CodeProtocol},
		{"codec ack on a stream", appendFrame(nil, frame.TypeCodecAck, 0, 1, frame.AppendCodecAck(nil, 1)), "CODEC_ACK on stream 1", frame.CodeProtocol},
		{"codec ack of zero", appendFrame(nil, frame.TypeCodecAck, 0, 0, []byte{0}), "codec ack of 0", frame.CodeProtocol},
		{"codec ack trailing bytes", appendFrame(nil, frame.TypeCodecAck, 0, 0, []byte{1, 1}), "codec ack of 2 bytes", frame.CodeProtocol},
		{"codec nack empty", appendFrame(nil, frame.TypeCodecNack, 0, 1, nil), "codec nack epoch", frame.CodeProtocol},
		{"codec nack long reason", appendFrame(nil, frame.TypeCodecNack, 0, 1, append([]byte{1}, make([]byte, frame.MaxReason+1)...)), "codec nack of", frame.CodeProtocol},
		{"codec nack on stream 0", appendFrame(nil, frame.TypeCodecNack, 0, 0, frame.AppendCodecNack(nil, 1, "")), "CODEC_NACK on stream 0", frame.CodeProtocol},
		{"interleaved coded message", append(codedMessage(nil, 1, deltaID, 1, 0, []byte("0123456789"), 0, 4)[:9+2+4], wholeMessage(nil, 3, msg)...),
			"inside the coded message of stream 1", frame.CodeProtocol},
		{"second start inside a coded message", append(codedMessage(nil, 1, deltaID, 1, 0, []byte("0123456789"), 0, 4)[:9+2+4], coded...),
			"second START", frame.CodeProtocol},
		{"coded end without trailer", appendFrame(nil, frame.TypeData, frame.FlagStart|frame.FlagEnd, 1, []byte{deltaID, 1, 0, 0}), "trailer truncated", frame.CodeProtocol},
		{"coded message beyond the window", codedMessage(nil, 1, deltaID, 1, 0, make([]byte, 300<<10), 0, 60<<10), "window", frame.CodeFlowControl},
		{"coded start after identity start", append(dataFrame(nil, 1, true, false, msg, 0), coded...), "second START", frame.CodeProtocol},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw, s, _ := codedRawServer(t, codecConfig("origin", 0), nil)
			_, err := raw.Write(tc.frames)
			require.NoError(t, err)
			code, reason := expectGoAway(t, raw)
			require.Equal(t, tc.code, code, reason)
			require.Contains(t, reason, tc.want)
			waitClosed(t, s)
		})
	}
}
