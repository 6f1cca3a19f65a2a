package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"

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
	faulty int // fault injection: desynchronize every Nth decoder (0: off)
}

// faultEnv names the fault-injection switch used by the e2e tests (e2e/codec_test.go):
// with SOAPGW_FAULT_DESYNC_EVERY=N, every Nth message a stateful decoder decodes is fed to
// it twice, so its dictionary state silently drifts from the encoder's — the failure the
// tunnel's epoch/resend protocol must turn into a resend, never a corrupted message.
const faultEnv = "SOAPGW_FAULT_DESYNC_EVERY"

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
	cs := &codecs{cfg: cfg}
	if v := os.Getenv(faultEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s=%q: want a positive integer", faultEnv, v)
		}
		cs.faulty = n
		log.Warn("codec fault injection is on: decoders are desynchronized on purpose", "every", n, "env", faultEnv)
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
	base.Encoding = enc
	base.MaxCodedMessage = int(cs.cfg.MaxCodedMessage)
	base.CodecRetention = int(cs.cfg.Retention)
	base.CodecName = func(id uint8) string { return codec.ID(id).String() }
	return &base
}

// routeOpener opens streams to a peer with a route's own codec.
func routeOpener(peer *tunnel.Peer, enc tunnel.Encoding) proxy.Opener {
	return proxy.OpenerFunc(func(ctx context.Context) (proxy.Stream, error) {
		st, err := peer.OpenStream(ctx)
		if err != nil {
			return nil, err // a nil *tunnel.Stream must not become a non-nil interface
		}
		st.SetEncoding(enc)
		return st, nil
	})
}

type tunnelCodec struct {
	c      codec.Codec
	faulty int
}

func (t *tunnelCodec) ID() uint8 { return uint8(t.c.ID()) }

func (t *tunnelCodec) Format() uint32 { return t.c.Format() }

func (t *tunnelCodec) NewEncoder() (tunnel.MessageEncoder, error) { return t.c.NewEncoder() }

func (t *tunnelCodec) NewDecoder(maxMessage int) (tunnel.MessageDecoder, error) {
	d, err := t.c.NewDecoder(codec.Limits{MaxMessage: maxMessage})
	if err != nil || t.faulty == 0 || (t.c.ID() != codec.Token && t.c.ID() != codec.ZstdStream) {
		return d, err
	}
	return &desyncDecoder{d: d, every: t.faulty}, nil
}

// desyncDecoder decodes every Nth payload a second time (discarding the result), which
// advances a stateful decoder's dictionaries past the encoder's. Test hook; see faultEnv.
type desyncDecoder struct {
	d     codec.Decoder
	every int
	n     int
}

func (f *desyncDecoder) Decode(dst, payload []byte) ([]byte, error) {
	out, err := f.d.Decode(dst, payload)
	f.n++
	if err == nil && f.n%f.every == 0 {
		_, _ = f.d.Decode(nil, payload)
	}
	return out, err
}
