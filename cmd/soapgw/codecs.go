package main

import (
	"context"
	"io"
	"log/slog"

	"github.com/soapgw/soapgw/internal/codec"
	"github.com/soapgw/soapgw/internal/config"
	"github.com/soapgw/soapgw/internal/proxy"
	"github.com/soapgw/soapgw/internal/tunnel"
)

// codecs adapts the codecs of internal/codec to the tunnel, which does not import them
// (STYLE.md: leaves import nothing of ours; only cmd knows every package).
type codecs struct {
	cfg    config.CodecConfig
	set    []tunnel.MessageCodec
	stream tunnel.StreamCodec // messages too large to code whole, or flushed
	faulty int                // fault injection: desynchronize every Nth decoder (0: off)
}

func newCodecs(cfg config.CodecConfig, log *slog.Logger) (*codecs, error) {
	all, err := codec.Set(codec.Options{
		GzipLevel:       cfg.GzipLevel,
		ZstdLevel:       cfg.ZstdLevel,
		ZstdDictionary:  cfg.ZstdDictionary,
		TokenDictionary: int(cfg.TokenDictionary),
	})
	if err != nil {
		return nil, err
	}
	zs, err := codec.NewStreaming(codec.Options{ZstdLevel: cfg.ZstdLevel, ZstdDictionary: cfg.ZstdDictionary})
	if err != nil {
		return nil, err
	}
	cs := &codecs{cfg: cfg, stream: streamCodec{zs}}
	if cs.faulty, err = desyncEvery(log); err != nil {
		return nil, err
	}
	for _, c := range all {
		if c.ID() != codec.Identity { // built into the tunnel
			cs.set = append(cs.set, &tunnelCodec{c: c, faulty: cs.faulty})
		}
	}
	return cs, nil
}

// policy returns the tunnel Encoding for a configured codec name.
func (cs *codecs) policy(name string) (tunnel.Encoding, error) {
	p, err := codec.NewPolicy(name, int(cs.cfg.AutoMinSize))
	if err != nil {
		return nil, err
	}
	return p, nil
}

// session fills the codec fields of a tunnel session configuration.
func (cs *codecs) session(base tunnel.Config, enc tunnel.Encoding) *tunnel.Config {
	base.Codecs = cs.set
	base.StreamCodec = cs.stream
	base.Encoding = enc
	base.MaxCodedMessage = int(cs.cfg.MaxCodedMessage)
	base.CodecRetention = int(cs.cfg.Retention)
	base.CodecName = func(id uint8) string { return codec.ID(id).String() }
	return &base
}

// routeOpener opens streams to a peer with a route's own codec.
func routeOpener(peer tunnelPeer, enc tunnel.Encoding) proxy.Opener {
	po := peerOpener{peer, enc}
	if fb, ok := peer.(*fallbackPeer); ok {
		return divertingOpener{po, fb}
	}
	return po
}

// peerOpener opens exchanges through a peer, with the codec policy enc (nil: the peer's).
type peerOpener struct {
	peer tunnelPeer
	enc  tunnel.Encoding
}

func (o peerOpener) OpenStream(ctx context.Context) (proxy.Stream, error) {
	return o.peer.open(ctx, o.enc, false)
}

// OpenBulkStream opens a stream for a one-way delivery (proxy.BulkOpener).
func (o peerOpener) OpenBulkStream(ctx context.Context) (proxy.Stream, error) {
	return o.peer.open(ctx, o.enc, true)
}

// divertingOpener is the opener of a UDP peer with fallback tcp: a proxy.Diverter, so the
// edge collects over TCP a large response the origin diverts there.
type divertingOpener struct {
	peerOpener
	fb *fallbackPeer
}

func (o divertingOpener) OpenDiverted(ctx context.Context) (proxy.Stream, error) {
	return o.fb.openDiverted(ctx, o.enc)
}

type tunnelCodec struct {
	c      codec.Codec
	faulty int
}

func (t *tunnelCodec) ID() uint8 { return uint8(t.c.ID()) }

func (t *tunnelCodec) Format() uint32 { return t.c.Format() }

// Stateless tells the UDP tunnel which codecs may code messages out of order.
func (t *tunnelCodec) Stateless() bool { return t.c.ID().Stateless() }

func (t *tunnelCodec) NewEncoder() (tunnel.MessageEncoder, error) { return t.c.NewEncoder() }

func (t *tunnelCodec) NewDecoder(maxMessage int) (tunnel.MessageDecoder, error) {
	d, err := t.c.NewDecoder(codec.Limits{MaxMessage: maxMessage})
	if err != nil || t.faulty == 0 || (t.c.ID() != codec.Token && t.c.ID() != codec.ZstdStream) {
		return d, err
	}
	return desynced(d, t.faulty), nil
}

// streamCodec adapts codec.Streaming to the tunnel.
type streamCodec struct{ s *codec.Streaming }

func (c streamCodec) ID() uint8 { return uint8(c.s.ID()) }

func (c streamCodec) Format() uint32 { return c.s.Format() }

func (c streamCodec) NewStreamEncoder(w io.Writer) (tunnel.StreamEncoder, error) {
	e, err := c.s.NewEncoder(w)
	if err != nil {
		return nil, err
	}
	return e, nil
}

func (c streamCodec) NewStreamDecoder(r io.Reader) (tunnel.StreamDecoder, error) {
	d, err := c.s.NewDecoder(r)
	if err != nil {
		return nil, err
	}
	return d, nil
}
