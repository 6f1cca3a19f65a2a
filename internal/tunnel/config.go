package tunnel

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

// Config tunes a session. A nil *Config means DefaultConfig().
type Config struct {
	// Node is this gateway's identity, sent in HELLO and used in the peer's logs and metrics.
	Node string
	// Instance, when set, is called once per connection for HELLO's instance
	// (frame.Hello.Instance): an origin names itself and when it set the connection up
	// (proxy.Origin.ConnectionInstance), so that an edge's resume can say which process
	// had its request and since when.
	Instance func() string
	// Codecs are the message codecs this side implements, to encode and to decode; their ids
	// (1..127, unique) go into HELLO. Identity (id 0) is built in and always implied.
	Codecs []MessageCodec
	// Encoding chooses the codec of each outgoing message (Stream.SetEncoding overrides it
	// per stream). nil: every message is sent as identity, as without codecs.
	Encoding Encoding
	// MaxCodedMessage is the largest message that is buffered and coded whole (default
	// 1 MiB), and the largest decoded message this side accepts (announced in HELLO as
	// max_coded). A sender codes only messages of at most min(own, peer's); larger or
	// flushed messages are streamed, with StreamCodec if both sides have it, else as
	// identity.
	MaxCodedMessage int
	// StreamCodec, if set, codes the messages that would be coded but cannot be coded
	// whole (larger than the limit, or flushed) as they are written; its id goes into
	// HELLO's codecs like the others. nil: such messages stream as identity.
	StreamCodec StreamCodec
	// CodecRetention bounds the bytes of sent coded messages kept until the peer
	// acknowledges them, for a resend if the peer cannot decode them (default 8 MiB, or
	// MaxCodedMessage if larger). Each message also costs 1 KiB for its stream, which is
	// kept until then too. When full, new messages go identity.
	CodecRetention int
	// CodecName names a codec id in metrics (default "codec-<id>"; id 0 is "identity").
	CodecName func(id uint8) string
	// MaxFrame is the largest frame payload this side accepts (default 64 KiB).
	MaxFrame uint32
	// FrameData is the most message bytes a sender puts in one DATA frame (default 16 KiB).
	// Smaller frames interleave streams more finely; larger ones cost fewer headers.
	FrameData int
	// StreamWindow is the receive window per stream (default 256 KiB).
	StreamWindow uint32
	// MaxStreams is how many concurrent peer-opened streams this side accepts (default
	// 1024, the UDP tunnel's and the edge's one-way deliveries' default: with 256, a
	// spool delivering over a slow link was held to 256 deliveries per round trip). Each
	// stream may buffer up to StreamWindow of received data.
	MaxStreams uint32
	// BulkDelay is how long the writer may hold frames of bulk streams (Stream.SetBulk:
	// one-way deliveries and their answers) so that those queued meanwhile share their
	// packets, when nothing else waits and the connection is busy (bulk.go; default 5 ms,
	// negative: never).
	BulkDelay time.Duration
	// HandshakeTimeout bounds the exchange of HELLO frames (default 10 s).
	HandshakeTimeout time.Duration
	// KeepaliveInterval is how often a PING is sent (default 15 s; 0 disables keepalive).
	KeepaliveInterval time.Duration
	// KeepaliveTimeout closes the session when the peer has been silent this long after a
	// PING (default 10 s).
	KeepaliveTimeout time.Duration
	// WriteTimeout bounds how long the connection may take no bytes (default 30 s): a
	// peer that stops reading must not hold every stream forever. It measures progress
	// (each 64 KiB written), not a whole flush, so a long queue on a slow link is not a
	// failure.
	WriteTimeout time.Duration
	// PeerAcked, if set, reports how many bytes the peer's transport has acknowledged on
	// conn so far (TCP_INFO's bytes_acked; cmd wires internal/sockopt), false when the
	// system cannot tell. While that count grows by more than a PING's worth, the peer
	// counts as alive for the keepalive: on a slow link the answer to our PING waits
	// behind the bulk data queued ahead of it in the socket and the network (32 KiB plus
	// the link's queue: tens of seconds at 40 kbit/s), longer than KeepaliveTimeout,
	// while the acknowledgements show the peer taking that data. A peer whose process
	// hangs stops reading: its window closes, the count stops, and the keepalive (or the
	// write progress deadline) ends the session.
	PeerAcked func(conn net.Conn) (uint64, bool)
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() *Config {
	return &Config{
		Node:              "soapgw",
		MaxFrame:          64 << 10,
		FrameData:         16 << 10,
		StreamWindow:      256 << 10,
		MaxStreams:        1024,
		HandshakeTimeout:  10 * time.Second,
		KeepaliveInterval: 15 * time.Second,
		KeepaliveTimeout:  10 * time.Second,
		WriteTimeout:      30 * time.Second,
		BulkDelay:         5 * time.Millisecond,
		MaxCodedMessage:   1 << 20,
		CodecRetention:    8 << 20,
	}
}

// withDefaults returns a copy of c with zero fields set to their defaults.
func (c *Config) withDefaults() *Config {
	d := DefaultConfig()
	if c == nil {
		return d
	}
	out := *c
	if out.Node == "" {
		out.Node = d.Node
	}
	if out.MaxFrame == 0 {
		out.MaxFrame = d.MaxFrame
	}
	if out.FrameData == 0 {
		out.FrameData = d.FrameData
	}
	if out.StreamWindow == 0 {
		out.StreamWindow = d.StreamWindow
	}
	if out.MaxStreams == 0 {
		out.MaxStreams = d.MaxStreams
	}
	if out.HandshakeTimeout == 0 {
		out.HandshakeTimeout = d.HandshakeTimeout
	}
	if out.KeepaliveTimeout == 0 {
		out.KeepaliveTimeout = d.KeepaliveTimeout
	}
	if out.WriteTimeout == 0 {
		out.WriteTimeout = d.WriteTimeout
	}
	if out.BulkDelay == 0 {
		out.BulkDelay = d.BulkDelay
	}
	if out.MaxCodedMessage == 0 {
		out.MaxCodedMessage = d.MaxCodedMessage
	}
	if out.CodecRetention == 0 {
		out.CodecRetention = max(d.CodecRetention, out.MaxCodedMessage)
	}
	return &out
}

// Validate checks fields against each other; errors name the field.
func (c *Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.MaxFrame < 1024 || c.MaxFrame > frame.MaxPayload:
		return fmt.Errorf("tunnel config: MaxFrame %d outside [1024, %d]", c.MaxFrame, frame.MaxPayload)
	case c.FrameData < 512:
		return fmt.Errorf("tunnel config: FrameData %d below 512", c.FrameData)
	case c.StreamWindow < c.MaxFrame || c.StreamWindow > 1<<30:
		return fmt.Errorf("tunnel config: StreamWindow %d outside [MaxFrame=%d, 2^30]", c.StreamWindow, c.MaxFrame)
	case c.KeepaliveInterval < 0 || c.KeepaliveTimeout < 0 || c.HandshakeTimeout < 0 || c.WriteTimeout < 0:
		return fmt.Errorf("tunnel config: negative timeout")
	case c.MaxCodedMessage < 0 || c.MaxCodedMessage > frame.MaxCodedLimit:
		return fmt.Errorf("tunnel config: MaxCodedMessage %d outside [0, 2^30]", c.MaxCodedMessage)
	case c.CodecRetention < c.MaxCodedMessage:
		return fmt.Errorf("tunnel config: CodecRetention %d below MaxCodedMessage %d: the largest coded messages could never be retained", c.CodecRetention, c.MaxCodedMessage)
	}
	var seen [frame.MaxCodecID + 1]bool
	for i, mc := range c.Codecs {
		if mc == nil {
			return fmt.Errorf("tunnel config: Codecs[%d] is nil", i)
		}
		id := mc.ID()
		if id == 0 || id > frame.MaxCodecID {
			return fmt.Errorf("tunnel config: Codecs[%d] has id %d outside [1, %d] (0 is identity, built in)", i, id, frame.MaxCodecID)
		}
		if seen[id] {
			return fmt.Errorf("tunnel config: Codecs[%d]: codec id %d listed twice", i, id)
		}
		seen[id] = true
	}
	if sc := c.StreamCodec; sc != nil {
		id := sc.ID()
		if id == 0 || id > frame.MaxCodecID || seen[id] {
			return fmt.Errorf("tunnel config: StreamCodec id %d is 0, above %d or the id of one of Codecs", id, frame.MaxCodecID)
		}
	}
	return nil
}

func (c *Config) hello() frame.Hello {
	codecs := []uint8{0}
	var maxCoded uint32
	var formats map[string]uint32
	for _, mc := range c.Codecs {
		codecs = append(codecs, mc.ID())
		if formats == nil {
			formats = map[string]uint32{}
		}
		formats[strconv.Itoa(int(mc.ID()))] = mc.Format()
	}
	if len(c.Codecs) > 0 {
		maxCoded = uint32(c.MaxCodedMessage)
	}
	if sc := c.StreamCodec; sc != nil {
		codecs = append(codecs, sc.ID())
		if formats == nil {
			formats = map[string]uint32{}
		}
		formats[strconv.Itoa(int(sc.ID()))] = sc.Format()
	}
	return frame.Hello{
		Proto:      frame.Proto,
		Node:       c.Node,
		Codecs:     codecs,
		MaxFrame:   c.MaxFrame,
		Window:     c.StreamWindow,
		MaxStreams: c.MaxStreams,
		MaxCoded:   maxCoded,
		Formats:    formats,
		Instance:   c.instance(),
	}
}

func (c *Config) instance() string {
	if c.Instance == nil {
		return ""
	}
	return c.Instance()
}
