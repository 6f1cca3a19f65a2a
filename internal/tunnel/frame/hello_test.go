package frame_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

// specJSON is the HELLO example from SPEC.md.
const specJSON = `{"proto":3,"node":"edge-1","codecs":[0],"max_frame":65536,"window":262144,"max_streams":256,"max_coded":1048576}`

func specHello() frame.Hello {
	return frame.Hello{Proto: 3, Node: "edge-1", Codecs: []uint8{0}, MaxFrame: 65536, Window: 262144, MaxStreams: 256, MaxCoded: 1 << 20}
}

// helloJSON renders a HELLO document by hand (codecs as a JSON array, as SPEC.md shows).
func helloJSON(maxFrame, window, maxStreams uint64) string {
	return fmt.Sprintf(`{"proto":3,"node":"n","codecs":[0,1],"max_frame":%d,"window":%d,"max_streams":%d,"max_coded":4096}`,
		maxFrame, window, maxStreams)
}

func TestParseHelloSpecExample(t *testing.T) {
	h, err := frame.ParseHello([]byte(specJSON))
	require.NoError(t, err)
	require.Equal(t, specHello(), h)
	require.Equal(t, frame.Proto, h.Proto)
}

func TestHelloRoundTrip(t *testing.T) {
	tests := []frame.Hello{
		specHello(),
		{Proto: 3, Node: "origin-7", Codecs: []uint8{0, 1, 2, 255}, MaxFrame: 1024, Window: 1024, MaxStreams: 1},
		{Proto: 3, Node: "", Codecs: nil, MaxFrame: frame.MaxPayload, Window: 1 << 30, MaxStreams: 1<<32 - 1, MaxCoded: frame.MaxCodedLimit},
		{Proto: 1, Node: `quo"te\ <&> ünï`, Codecs: []uint8{}, MaxFrame: 4096, Window: 1 << 20, MaxStreams: 64, MaxCoded: 1},
		{Proto: 3, Node: "e", Codecs: []uint8{0, 2, 4}, MaxFrame: 4096, Window: 4096, MaxStreams: 1, MaxCoded: 1,
			Formats: map[string]uint32{"2": 1, "4": 1<<32 - 1}},
		{Proto: 3, Node: "o", Codecs: []uint8{0}, MaxFrame: 4096, Window: 4096, MaxStreams: 1, Instance: "3fa2c1d09e8b7a65.120034"},
	}
	for _, want := range tests {
		b := frame.AppendHello(nil, want)
		require.LessOrEqual(t, len(b), frame.MaxHello)
		require.True(t, json.Valid(b), "%s", b)
		got, err := frame.ParseHello(b)
		require.NoError(t, err, "%s", b)
		require.Equal(t, want, got, "%s", b)
	}
}

func TestHelloMemberNames(t *testing.T) {
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(frame.AppendHello(nil, specHello()), &m))
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	require.ElementsMatch(t, []string{"proto", "node", "codecs", "max_frame", "window", "max_streams", "max_coded"}, keys)
	require.JSONEq(t, `3`, string(m["proto"]))
	require.JSONEq(t, `1048576`, string(m["max_coded"]))
	require.JSONEq(t, `"edge-1"`, string(m["node"]))
	require.JSONEq(t, `65536`, string(m["max_frame"]))
	require.JSONEq(t, `262144`, string(m["window"]))
	require.JSONEq(t, `256`, string(m["max_streams"]))
}

// TestAppendHelloCodecsIsJSONArray is the regression test for a wire-format bug: codecs
// used to be marshalled as a base64 string ("AA==") where SPEC.md specifies a JSON array,
// which only Go peers could read.
func TestAppendHelloCodecsIsJSONArray(t *testing.T) {
	b := frame.AppendHello(nil, specHello())
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &m))
	require.JSONEq(t, `[0]`, string(m["codecs"]), "HELLO payload: %s", b)
	require.JSONEq(t, specJSON, string(b))
}

func TestParseHelloLenient(t *testing.T) {
	tests := map[string]string{
		"unknown members ignored": `{"proto":3,"node":"edge-1","codecs":[0],"max_frame":65536,"window":262144,"max_streams":256,"max_coded":1048576,"future":{"x":[1,2]},"z":null}`,
		"member order free":       `{"max_coded":1048576,"max_streams":256,"window":262144,"max_frame":65536,"codecs":[0],"node":"edge-1","proto":3}`,
		"whitespace":              " \n\t" + specJSON + " \r\n",
		"escaped strings":         `{"proto":3,"node":"\u0065dge-1","codecs":[0],"max_frame":65536,"window":262144,"max_streams":256,"max_coded":1048576}`,
	}
	for name, doc := range tests {
		h, err := frame.ParseHello([]byte(doc))
		require.NoError(t, err, name)
		require.Equal(t, specHello(), h, name)
	}
}

func TestParseHelloBounds(t *testing.T) {
	const mp = frame.MaxPayload
	tests := []struct {
		name                        string
		maxFrame, window, maxStream uint64
		ok                          bool
	}{
		{"minimum", 1024, 1024, 1, true},
		{"maximum", mp, 1 << 30, 1<<32 - 1, true},
		{"max_frame 0", 0, 1024, 1, false},
		{"max_frame below 1024", 1023, 1024, 1, false},
		{"max_frame above MaxPayload", mp + 1, 1 << 30, 1, false},
		{"window below max_frame", 4096, 4095, 1, false},
		{"window equals max_frame", 4096, 4096, 1, true},
		{"window zero", 4096, 0, 1, false},
		{"window 2^30", 4096, 1 << 30, 1, true},
		{"window above 2^30", 4096, 1<<30 + 1, 1, false},
		{"window max uint32", 4096, 1<<32 - 1, 1, false},
		{"max_streams 0", 4096, 4096, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := frame.ParseHello([]byte(helloJSON(tt.maxFrame, tt.window, tt.maxStream)))
			if !tt.ok {
				require.ErrorIs(t, err, frame.ErrBadPayload)
				return
			}
			require.NoError(t, err)
			require.Equal(t, frame.Hello{Proto: 3, Node: "n", Codecs: []uint8{0, 1},
				MaxFrame: uint32(tt.maxFrame), Window: uint32(tt.window), MaxStreams: uint32(tt.maxStream), MaxCoded: 4096}, h)
		})
	}
}

func TestParseHelloMaxCoded(t *testing.T) {
	for _, tt := range []struct {
		doc string
		ok  bool
		v   uint32
	}{
		{`"max_coded":0`, true, 0},
		{`"max_coded":1`, true, 1},
		{`"max_coded":1073741824`, true, frame.MaxCodedLimit},
		{`"max_coded":1073741825`, false, 0},
		{`"max_coded":-1`, false, 0},
		{`"max_coded":"1"`, false, 0},
	} {
		doc := strings.Replace(specJSON, `"max_coded":1048576`, tt.doc, 1)
		h, err := frame.ParseHello([]byte(doc))
		if !tt.ok {
			require.ErrorIs(t, err, frame.ErrBadPayload, doc)
			continue
		}
		require.NoError(t, err, doc)
		require.Equal(t, tt.v, h.MaxCoded)
	}
	// A HELLO without max_coded (0) is valid: that side takes no coded messages.
	h, err := frame.ParseHello([]byte(strings.Replace(specJSON, `,"max_coded":1048576`, "", 1)))
	require.NoError(t, err)
	require.Zero(t, h.MaxCoded)
}

func TestParseHelloMissingMembers(t *testing.T) {
	// Missing limits decode as 0, which the bounds reject.
	for _, doc := range []string{
		`{}`,
		`{"proto":1,"node":"n","codecs":[0]}`,
		`{"proto":1,"max_frame":65536,"window":262144}`,
		`{"proto":1,"max_frame":65536,"max_streams":1}`,
		`null`,
	} {
		_, err := frame.ParseHello([]byte(doc))
		require.ErrorIs(t, err, frame.ErrBadPayload, doc)
	}
}

func TestParseHelloBadJSON(t *testing.T) {
	tests := map[string]string{
		"empty":              ``,
		"truncated":          specJSON[:len(specJSON)-1],
		"trailing garbage":   specJSON + `x`,
		"two documents":      specJSON + specJSON,
		"array":              `[1,2]`,
		"string":             `"hello"`,
		"not json":           "\x00\x01\x02",
		"proto string":       strings.Replace(specJSON, `"proto":3`, `"proto":"3"`, 1),
		"proto float":        strings.Replace(specJSON, `"proto":3`, `"proto":1.5`, 1),
		"codec above 255":    strings.Replace(specJSON, `[0]`, `[0,256]`, 1),
		"codec negative":     strings.Replace(specJSON, `[0]`, `[-1]`, 1),
		"codecs object":      strings.Replace(specJSON, `[0]`, `{}`, 1),
		"max_frame negative": strings.Replace(specJSON, `65536`, `-65536`, 1),
		"window overflows":   strings.Replace(specJSON, `262144`, `4294967296`, 1),
		"node number":        strings.Replace(specJSON, `"edge-1"`, `1`, 1),
	}
	for name, doc := range tests {
		_, err := frame.ParseHello([]byte(doc))
		require.ErrorIs(t, err, frame.ErrBadPayload, "%s: %s", name, doc)
	}
}

func TestParseHelloSizeLimit(t *testing.T) {
	pad := func(n int) []byte {
		b := []byte(specJSON)
		return append(b, strings.Repeat(" ", n-len(b))...)
	}
	h, err := frame.ParseHello(pad(frame.MaxHello))
	require.NoError(t, err)
	require.Equal(t, specHello(), h)

	_, err = frame.ParseHello(pad(frame.MaxHello + 1))
	require.ErrorIs(t, err, frame.ErrBadPayload)
}

// TestHelloReencodeStaysWithinMaxHello is the regression test for an encoder/decoder
// asymmetry: ParseHello used to accept a 4096-byte HELLO whose node name of '<' re-encoded
// (with HTML escaping) to 24 KB, which ParseHello then rejected. Node names are now bounded
// to MaxNode bytes of valid UTF-8 and HTML escaping is off, so every accepted HELLO
// re-encodes within MaxHello.
func TestHelloReencodeStaysWithinMaxHello(t *testing.T) {
	prefix := `{"proto":3,"codecs":[0],"max_frame":65536,"window":262144,"max_streams":256,"node":"`
	doc := prefix + strings.Repeat("<", frame.MaxHello-len(prefix)-2) + `"}`
	_, err := frame.ParseHello([]byte(doc))
	require.ErrorIs(t, err, frame.ErrBadPayload, "over-long node name must be rejected")

	doc = prefix + strings.Repeat("<", frame.MaxNode) + `"}`
	h, err := frame.ParseHello([]byte(doc))
	require.NoError(t, err)
	enc := frame.AppendHello(nil, h)
	require.LessOrEqual(t, len(enc), frame.MaxHello)
	again, err := frame.ParseHello(enc)
	require.NoError(t, err)
	require.Equal(t, h, again)

	_, err = frame.ParseHello([]byte(prefix + "\xff\xfe" + `"}`))
	require.NoError(t, err, "JSON escapes of invalid UTF-8 decode to U+FFFD, which is valid")
}

func TestParseHelloFormats(t *testing.T) {
	for _, tt := range []struct {
		formats string
		ok      bool
	}{
		{`{}`, true},
		{`{"1":1,"4":7,"127":4294967295}`, true},
		{`null`, true},
		{`{"0":1}`, false},
		{`{"128":1}`, false},
		{`{"04":1}`, false},
		{`{"+4":1}`, false},
		{`{"zstd":1}`, false},
		{`{"4":-1}`, false},
		{`{"4":4294967296}`, false},
		{`[1,2]`, false},
	} {
		doc := strings.Replace(specJSON, `"max_coded":1048576`, `"max_coded":1048576,"formats":`+tt.formats, 1)
		h, err := frame.ParseHello([]byte(doc))
		if !tt.ok {
			require.ErrorIs(t, err, frame.ErrBadPayload, tt.formats)
			continue
		}
		require.NoError(t, err, tt.formats)
		if tt.formats == `{"1":1,"4":7,"127":4294967295}` {
			require.Equal(t, uint32(7), h.FormatOf(4))
			require.Equal(t, uint32(1<<32-1), h.FormatOf(127))
			require.Zero(t, h.FormatOf(2), "an unlisted codec is format 0")
		}
	}
}

func TestParseHelloInstance(t *testing.T) {
	for _, tc := range []struct {
		instance string
		ok       bool
	}{
		{"3fa2c1d09e8b7a65.120034", true},
		{strings.Repeat("a", frame.MaxInstance), true},
		{strings.Repeat("a", frame.MaxInstance+1), false},
		{"with space", false},
		{"ünï", false},
		{"tab\t", false},
	} {
		b, err := json.Marshal(map[string]any{"proto": 3, "node": "n", "codecs": []int{0}, "max_frame": 1024,
			"window": 1024, "max_streams": 1, "instance": tc.instance})
		require.NoError(t, err)
		h, err := frame.ParseHello(b)
		if !tc.ok {
			require.ErrorIs(t, err, frame.ErrBadPayload, "%q", tc.instance)
			continue
		}
		require.NoError(t, err, "%q", tc.instance)
		require.Equal(t, tc.instance, h.Instance)
	}
}
