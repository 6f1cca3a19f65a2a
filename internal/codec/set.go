package codec

import (
	"bytes"
	_ "embed"
	"fmt"

	"github.com/soapgw/soapgw/internal/envelope"
)

// builtinZstdDict is a zstd dictionary trained on the generated SOAP traffic of
// internal/trafficgen (see gendict.go). Both gateways ship the same one.
//
//go:embed zstd_dict.bin
var builtinZstdDict []byte

// Options configure the codecs a gateway offers. The zero value means the defaults.
type Options struct {
	// GzipLevel is 1 (fastest) .. 9 (smallest); 0 means the library default (6-ish).
	GzipLevel int
	// ZstdLevel is on the zstd scale 1..22, mapped to the library's four levels; 0 means 3.
	ZstdLevel int
	// ZstdDictionary is "builtin" (the default: trained on SOAP traffic, shipped in the
	// binary) or "none". Both ends must agree for the zstd codec (id 2); the peer
	// refuses payloads coded with a dictionary it lacks (and the message is resent).
	ZstdDictionary string
	// TokenDictionary is the token codec's dictionary budget per connection direction
	// in bytes; 0 means DefaultTokenDict.
	TokenDictionary int
}

// zstdOptions are the options of the zstd codecs that share the dictionary (zstd and
// zstd-streaming).
func (o Options) zstdOptions() ([]ZstdOption, error) {
	var zopts []ZstdOption
	if o.ZstdLevel != 0 {
		zopts = append(zopts, ZstdLevel(o.ZstdLevel))
	}
	switch o.ZstdDictionary {
	case "", "builtin":
		zopts = append(zopts, ZstdDictionary(builtinZstdDict))
	case "none":
	default:
		return nil, fmt.Errorf("codec: zstd dictionary %q: want builtin or none", o.ZstdDictionary)
	}
	return zopts, nil
}

// Set returns every implemented codec configured by o, by id.
func Set(o Options) ([]Codec, error) {
	var gopts []GzipOption
	if o.GzipLevel != 0 {
		gopts = append(gopts, GzipLevel(o.GzipLevel))
	}
	zopts, err := o.zstdOptions()
	if err != nil {
		return nil, err
	}
	var topts []TokenOption
	if o.TokenDictionary != 0 {
		topts = append(topts, TokenDictionary(o.TokenDictionary))
	}
	g, err := NewGzip(gopts...)
	if err != nil {
		return nil, err
	}
	z, err := NewZstd(zopts...)
	if err != nil {
		return nil, err
	}
	// zstd-stream keeps its own context across messages: a dictionary adds little there,
	// and the level is the one knob.
	var sopts []ZstdOption
	if o.ZstdLevel != 0 {
		sopts = append(sopts, ZstdLevel(o.ZstdLevel))
	}
	zs, err := NewZstdStream(sopts...)
	if err != nil {
		return nil, err
	}
	t, err := NewToken(topts...)
	if err != nil {
		return nil, err
	}
	return []Codec{identityCodec{}, g, z, zs, t}, nil
}

// Names lists the configuration names of the codecs and policies, in documentation order.
var Names = []string{"identity", "gzip", "zstd", "zstd-stream", "token", "auto"}

// ByName returns the id of a codec's configuration name ("auto" is a policy, not a codec:
// see [NewPolicy]).
func ByName(name string) (ID, bool) {
	for _, id := range []ID{Identity, Gzip, Zstd, ZstdStream, Token} {
		if id.String() == name {
			return id, true
		}
	}
	return 0, false
}

// Policy chooses the codec of each outgoing message. It satisfies the tunnel's Encoding
// interface (structurally: the tunnel does not import this package).
type Policy struct {
	name    string
	want    ID   // the configured codec; unused for auto
	auto    bool // choose per message
	minSize int  // auto: messages shorter than this travel uncoded
}

// DefaultAutoMinSize is the size below which auto sends a message uncoded. With state
// shared across messages even the smallest SOAP message codes to a few bytes (see
// docs/codecs.md), so the default codes everything.
const DefaultAutoMinSize = 0

// NewPolicy returns the policy for a configuration name: one of [Names].
func NewPolicy(name string, autoMinSize int) (*Policy, error) {
	if name == "auto" {
		return &Policy{name: name, auto: true, minSize: autoMinSize}, nil
	}
	id, ok := ByName(name)
	if !ok {
		return nil, fmt.Errorf("codec: unknown codec %q (want one of %v)", name, Names)
	}
	return &Policy{name: name, want: id}, nil
}

// String is the policy's configuration name.
func (p *Policy) String() string { return p.name }

// Choose returns the codec id for msg among those the peer decodes. A configured codec
// the peer lacks falls back to what auto would pick from the rest: both sides must
// support a codec, and an older or differently built peer still gets compressed traffic.
func (p *Policy) Choose(msg []byte, peerDecodes func(id uint8) bool) uint8 {
	if !p.auto {
		if p.want == Identity || peerDecodes(uint8(p.want)) {
			return uint8(p.want)
		}
	}
	if len(msg) < p.minSize {
		return uint8(Identity)
	}
	order := []ID{ZstdStream, Zstd, Gzip}
	if looksXML(msg) {
		order = []ID{Token, ZstdStream, Zstd, Gzip}
	}
	for _, id := range order {
		if peerDecodes(uint8(id)) {
			return uint8(id)
		}
	}
	return uint8(Identity)
}

// looksXML reports whether the body of a tunnel message (after its envelope head, if it
// has one) is XML or empty: what the token codec is built for. MTOM multipart, JSON
// and binary bodies go to a general compressor instead.
func looksXML(msg []byte) bool {
	body := msg
	if _, b, err := envelope.Split(msg); err == nil {
		body = b
	}
	body = bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))
	body = bytes.TrimLeft(body, " \t\r\n")
	return len(body) == 0 || body[0] == '<'
}
