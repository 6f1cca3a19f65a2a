package frame_test

import (
	"bufio"
	"encoding/hex"
	"hash/crc32"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

// goldenFrame is the decoded form of one golden vector: the header plus whichever payload
// fields its type carries. Both directions of TestGolden produce one and compare them.
type goldenFrame struct {
	Header   frame.Header
	Preamble *frame.Preamble // DATA with START
	Msg      []byte          // DATA message bytes
	CRC      *uint32         // DATA with END
	Incr     uint32          // WINDOW_UPDATE
	Code     frame.Code      // RST_STREAM, GOAWAY
	Reason   string          // RST_STREAM, GOAWAY
	Last     uint32          // GOAWAY
	Ping     uint64          // PING
	Count    uint64          // CODEC_ACK
	Epoch    uint64          // CODEC_NACK
	Hello    *frame.Hello    // HELLO
	Raw      []byte          // unknown types
}

type goldenVector struct {
	name  string
	line  int
	frame goldenFrame
	wire  []byte
}

var typeByName = map[string]frame.Type{
	"DATA":          frame.TypeData,
	"WINDOW_UPDATE": frame.TypeWindowUpdate,
	"RST_STREAM":    frame.TypeRSTStream,
	"PING":          frame.TypePing,
	"GOAWAY":        frame.TypeGoAway,
	"HELLO":         frame.TypeHello,
	"CODEC_ACK":     frame.TypeCodecAck,
	"CODEC_NACK":    frame.TypeCodecNack,
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// splitFields splits a description into space-separated tokens; a value may be a Go-quoted
// string containing spaces (key="a b").
func splitFields(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		end := strings.IndexAny(s, " \"")
		if end < 0 {
			out = append(out, s)
			break
		}
		if s[end] == ' ' {
			out = append(out, s[:end])
			s = s[end:]
			continue
		}
		q, err := strconv.QuotedPrefix(s[end:])
		require.NoError(t, err, "bad quoted value in %q", s)
		out = append(out, s[:end]+q)
		s = s[end+len(q):]
	}
	return out
}

func parseUint(t *testing.T, s string, bits int) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 0, bits)
	require.NoError(t, err)
	return v
}

func parseFlags(t *testing.T, typ frame.Type, s string) frame.Flags {
	t.Helper()
	var f frame.Flags
	for _, p := range strings.Split(s, "|") {
		switch {
		case p == "START" && typ == frame.TypeData:
			f |= frame.FlagStart
		case p == "END" && typ == frame.TypeData:
			f |= frame.FlagEnd
		case p == "ACK" && typ == frame.TypePing:
			f |= frame.FlagAck
		default:
			f |= frame.Flags(parseUint(t, p, 8))
		}
	}
	return f
}

func parseCode(t *testing.T, s string) frame.Code {
	t.Helper()
	for c := frame.Code(0); c <= frame.CodeCodec; c++ {
		if c.String() == s {
			return c
		}
	}
	return frame.Code(parseUint(t, s, 32))
}

func parseDescription(t *testing.T, desc string) goldenFrame {
	t.Helper()
	fields := splitFields(t, desc)
	require.NotEmpty(t, fields)
	var g goldenFrame
	if typ, ok := typeByName[fields[0]]; ok {
		g.Header.Type = typ
	} else {
		g.Header.Type = frame.Type(parseUint(t, fields[0], 8))
	}
	var hello frame.Hello
	var codec, epoch, ack uint64
	var haveCodec, haveEpoch bool
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		require.True(t, ok, "field %q is not key=value", f)
		if strings.HasPrefix(v, `"`) {
			u, err := strconv.Unquote(v)
			require.NoError(t, err)
			v = u
		}
		switch k {
		case "flags":
			g.Header.Flags = parseFlags(t, g.Header.Type, v)
		case "stream":
			g.Header.StreamID = uint32(parseUint(t, v, 32))
		case "codec":
			codec, haveCodec = parseUint(t, v, 8), true
		case "epoch":
			epoch, haveEpoch = parseUint(t, v, 64), true
		case "ack":
			ack = parseUint(t, v, 64)
		case "count":
			g.Count = parseUint(t, v, 64)
		case "msg":
			g.Msg = nilIfEmpty([]byte(v))
		case "crc":
			c := uint32(parseUint(t, v, 32))
			g.CRC = &c
		case "incr":
			g.Incr = uint32(parseUint(t, v, 32))
		case "code":
			g.Code = parseCode(t, v)
		case "reason":
			g.Reason = v
		case "last":
			g.Last = uint32(parseUint(t, v, 32))
		case "data":
			g.Ping = parseUint(t, v, 64)
		case "payload":
			raw, err := hex.DecodeString(v)
			require.NoError(t, err)
			g.Raw = nilIfEmpty(raw)
		case "proto":
			hello.Proto = int(parseUint(t, v, 31))
		case "node":
			hello.Node = v
		case "codecs":
			hello.Codecs = []uint8{}
			for _, c := range strings.Split(v, ",") {
				if c != "" {
					hello.Codecs = append(hello.Codecs, uint8(parseUint(t, c, 8)))
				}
			}
		case "max_frame":
			hello.MaxFrame = uint32(parseUint(t, v, 32))
		case "window":
			hello.Window = uint32(parseUint(t, v, 32))
		case "max_streams":
			hello.MaxStreams = uint32(parseUint(t, v, 32))
		case "max_coded":
			hello.MaxCoded = uint32(parseUint(t, v, 32))
		default:
			t.Fatalf("unknown field %q", k)
		}
	}
	switch g.Header.Type {
	case frame.TypeData:
		start := g.Header.Flags.Has(frame.FlagStart)
		require.Equal(t, start, haveCodec && haveEpoch, "DATA needs codec and epoch exactly when START is set")
		if start {
			g.Preamble = &frame.Preamble{Codec: uint8(codec), Epoch: epoch, Ack: ack}
		}
		require.Equal(t, g.Header.Flags.Has(frame.FlagEnd), g.CRC != nil, "DATA needs crc exactly when END is set")
	case frame.TypeCodecNack:
		g.Epoch = epoch
	case frame.TypeHello:
		g.Hello = &hello
	}
	return g
}

func loadGolden(t *testing.T) []goldenVector {
	t.Helper()
	f, err := os.Open("testdata/golden.txt")
	require.NoError(t, err)
	defer f.Close()
	var out []goldenVector
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, rest, ok := strings.Cut(line, ": ")
		require.True(t, ok, "line %d: missing name", n)
		require.False(t, seen[name], "line %d: duplicate name %q", n, name)
		seen[name] = true
		desc, hx, ok := strings.Cut(rest, " => ")
		require.True(t, ok, "line %d: missing =>", n)
		hx = strings.NewReplacer(" ", "", "|", "").Replace(hx)
		wire, err := hex.DecodeString(hx)
		require.NoError(t, err, "line %d", n)
		g := parseDescription(t, desc)
		require.GreaterOrEqual(t, len(wire), frame.HeaderLen, "line %d", n)
		g.Header.Length = uint32(len(wire) - frame.HeaderLen)
		out = append(out, goldenVector{name: name, line: n, frame: g, wire: wire})
	}
	require.NoError(t, sc.Err())
	return out
}

func encodeGolden(t *testing.T, g goldenFrame) []byte {
	t.Helper()
	var p []byte
	switch g.Header.Type {
	case frame.TypeData:
		if g.Preamble != nil {
			p = g.Preamble.Append(p)
		}
		p = append(p, g.Msg...)
		if g.CRC != nil {
			p = frame.AppendTrailer(p, *g.CRC)
		}
	case frame.TypeWindowUpdate:
		p = frame.AppendWindowUpdate(p, g.Incr)
	case frame.TypeRSTStream:
		p = frame.AppendRST(p, g.Code, g.Reason)
	case frame.TypePing:
		p = frame.AppendPing(p, g.Ping)
	case frame.TypeGoAway:
		p = frame.AppendGoAway(p, g.Last, g.Code, g.Reason)
	case frame.TypeHello:
		p = frame.AppendHello(p, *g.Hello)
	case frame.TypeCodecAck:
		p = frame.AppendCodecAck(p, g.Count)
	case frame.TypeCodecNack:
		p = frame.AppendCodecNack(p, g.Epoch, g.Reason)
	default:
		p = append(p, g.Raw...)
	}
	h := g.Header
	h.Length = uint32(len(p))
	return append(h.Append(nil), p...)
}

func decodeGolden(t *testing.T, b []byte) goldenFrame {
	t.Helper()
	h, err := frame.ParseHeader(b, 0)
	require.NoError(t, err)
	require.Len(t, b, frame.HeaderLen+int(h.Length), "header length must cover exactly the payload")
	p := b[frame.HeaderLen:]
	g := goldenFrame{Header: h}
	switch h.Type {
	case frame.TypeData:
		if h.Flags.Has(frame.FlagStart) {
			pre, rest, err := frame.ParsePreamble(p)
			require.NoError(t, err)
			g.Preamble, p = &pre, rest
		}
		if h.Flags.Has(frame.FlagEnd) {
			data, crc, err := frame.ParseTrailer(p)
			require.NoError(t, err)
			g.CRC, p = &crc, data
		}
		g.Msg = nilIfEmpty(p)
	case frame.TypeWindowUpdate:
		g.Incr, err = frame.ParseWindowUpdate(p)
		require.NoError(t, err)
	case frame.TypeRSTStream:
		g.Code, g.Reason, err = frame.ParseRST(p)
		require.NoError(t, err)
	case frame.TypePing:
		g.Ping, err = frame.ParsePing(p)
		require.NoError(t, err)
	case frame.TypeGoAway:
		g.Last, g.Code, g.Reason, err = frame.ParseGoAway(p)
		require.NoError(t, err)
	case frame.TypeHello:
		hello, err := frame.ParseHello(p)
		require.NoError(t, err)
		g.Hello = &hello
	case frame.TypeCodecAck:
		g.Count, err = frame.ParseCodecAck(p)
		require.NoError(t, err)
	case frame.TypeCodecNack:
		g.Epoch, g.Reason, err = frame.ParseCodecNack(p)
		require.NoError(t, err)
	default:
		g.Raw = nilIfEmpty(p)
	}
	return g
}

// TestGolden pins the wire format: every vector in testdata/golden.txt must encode to its
// hex and its hex must decode to its description.
func TestGolden(t *testing.T) {
	vectors := loadGolden(t)
	require.GreaterOrEqual(t, len(vectors), 10)
	types := map[frame.Type]bool{}
	for _, v := range vectors {
		types[v.frame.Header.Type] = true
		t.Run(v.name, func(t *testing.T) {
			t.Run("decode", func(t *testing.T) {
				require.Equal(t, v.frame, decodeGolden(t, v.wire), "testdata/golden.txt:%d", v.line)
			})
			t.Run("encode", func(t *testing.T) {
				require.Equal(t, hex.EncodeToString(v.wire), hex.EncodeToString(encodeGolden(t, v.frame)),
					"testdata/golden.txt:%d", v.line)
			})
		})
	}
	for typ := range typeByName {
		require.True(t, types[typeByName[typ]], "no golden vector for %s", typ)
	}
}

// TestGoldenSingleFrameCRC checks that the single-frame identity-codec vectors carry the
// CRC-32C (Castagnoli) of their message, as SPEC.md requires, so the vectors themselves are
// consistent with the spec and not just with the code.
func TestGoldenSingleFrameCRC(t *testing.T) {
	table := crc32.MakeTable(crc32.Castagnoli)
	checked := 0
	for _, v := range loadGolden(t) {
		g := v.frame
		if g.Header.Type != frame.TypeData || g.Preamble == nil || g.CRC == nil || g.Preamble.Codec != 0 {
			continue
		}
		require.Equal(t, crc32.Checksum(g.Msg, table), *g.CRC, v.name)
		checked++
	}
	require.Positive(t, checked)
}
