package quic

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/codec"
	"github.com/soapgw/soapgw/internal/peerauth"
	"github.com/soapgw/soapgw/internal/tunnel"
)

// realCodec adapts internal/codec to the tunnel's codec interfaces, as cmd/soapgw does.
type realCodec struct{ c codec.Codec }

func (r realCodec) ID() uint8                                  { return uint8(r.c.ID()) }
func (r realCodec) Format() uint32                             { return r.c.Format() }
func (r realCodec) Stateless() bool                            { return r.c.ID().Stateless() }
func (r realCodec) NewEncoder() (tunnel.MessageEncoder, error) { return r.c.NewEncoder() }
func (r realCodec) NewDecoder(max int) (tunnel.MessageDecoder, error) {
	return r.c.NewDecoder(codec.Limits{MaxMessage: max})
}

// realStreamCodec adapts codec.Streaming as cmd/soapgw does.
type realStreamCodec struct{ s *codec.Streaming }

func (r realStreamCodec) ID() uint8      { return uint8(r.s.ID()) }
func (r realStreamCodec) Format() uint32 { return r.s.Format() }
func (r realStreamCodec) NewStreamEncoder(w io.Writer) (tunnel.StreamEncoder, error) {
	return r.s.NewEncoder(w)
}
func (r realStreamCodec) NewStreamDecoder(rd io.Reader) (tunnel.StreamDecoder, error) {
	return r.s.NewDecoder(rd)
}

func testCodecs(t testing.TB) []tunnel.MessageCodec {
	all, err := codec.Set(codec.Options{})
	require.NoError(t, err)
	var out []tunnel.MessageCodec
	for _, c := range all {
		if c.ID() != codec.Identity {
			out = append(out, realCodec{c})
		}
	}
	return out
}

// filterConn is a UDP socket whose outgoing packets a test may drop; dark drops every
// packet both ways (a path that stopped carrying UDP).
type filterConn struct {
	net.PacketConn
	drop    atomic.Pointer[func(p []byte) bool]
	dropIn  atomic.Pointer[func(p []byte) bool] // incoming packets to drop
	dropped atomic.Int64
	dark    atomic.Bool
	delay   atomic.Int64 // nanoseconds every outgoing packet is held: a longer path
	small   atomic.Int64 // packets written shorter than smallPacket
}

// smallPacket: a QUIC packet this short carries no message of the tests that count them
// (an acknowledgement alone, a control frame alone).
const smallPacket = 64

func (f *filterConn) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, addr, err := f.PacketConn.ReadFrom(p)
		if d := f.dropIn.Load(); err == nil && d != nil && (*d)(p[:n]) {
			f.dropped.Add(1)
			continue
		}
		if err != nil || !f.dark.Load() {
			return n, addr, err
		}
	}
}

func (f *filterConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	if len(p) < smallPacket {
		f.small.Add(1)
	}
	if d := f.drop.Load(); f.dark.Load() || d != nil && (*d)(p) {
		f.dropped.Add(1)
		return len(p), nil
	}
	if d := time.Duration(f.delay.Load()); d > 0 {
		late := append([]byte(nil), p...)
		time.AfterFunc(d, func() { _, _ = f.PacketConn.WriteTo(late, addr) })
		return len(p), nil
	}
	return f.PacketConn.WriteTo(p, addr)
}

func (f *filterConn) setDrop(d func(p []byte) bool) {
	if d == nil {
		f.drop.Store(nil)
		return
	}
	f.drop.Store(&d)
}

// setDropIn drops the incoming packets d returns true for (nil: none).
func (f *filterConn) setDropIn(d func(p []byte) bool) {
	if d == nil {
		f.dropIn.Store(nil)
		return
	}
	f.dropIn.Store(&d)
}

// pair is an origin Server and an edge Peer over loopback UDP, authenticated with a
// shared key, with a handler the test sets.
type pair struct {
	srv        *Server
	peer       *Peer
	reg        *prometheus.Registry
	edgeSock   atomic.Pointer[filterConn]
	originSock *filterConn // set with pairOptions.delay
	handler    atomic.Pointer[Handler]
}

type pairOptions struct {
	codecs   bool
	encoding tunnel.Encoding
	// codecList replaces testCodecs on both sides (with codecs).
	codecList func(testing.TB) []tunnel.MessageCodec
	edgeKey   string // key file content for the edge; default the origin's
	plain     bool   // the edge's socket is a bare *net.UDPConn (quic-go's fast paths), not droppable
	window    int    // sequenced window, both sides
	// bulkWindow is the window of bulk messages, both sides (0: the default).
	bulkWindow int
	copies     Redundancy    // the edge's redundancy (zero: off)
	instance   func() string // the origin's tunnel.Config.Instance
	insecure   bool          // insecure: true on both sides (encrypted, nobody verified)
	stream     bool          // zstd-streaming on both sides (with codecs)
	// keepalive is both sides' keepalive interval and timeout (default 2 s); the QUIC
	// idle timeout is the interval plus max(timeout, 1 s).
	keepalive time.Duration
	// delay holds every packet both sides send that long: a path of twice that RTT.
	delay time.Duration
	// divert: the edge announces a TCP tunnel beside (PeerConfig.Divert).
	divert bool
	// originFilter gives the origin a droppable socket (originSock) even without delay.
	originFilter bool
	// maxStreams is the origin's stream limit per connection (0: the default).
	maxStreams int64
}

func newPair(t testing.TB, o pairOptions) *pair {
	t.Helper()
	key, err := peerauth.GenerateKey()
	require.NoError(t, err)
	keys, err := peerauth.ParseKeys("origin.key", []byte(key))
	require.NoError(t, err)
	edgeKeys := keys
	if o.edgeKey != "" {
		edgeKeys, err = peerauth.ParseKeys("edge.key", []byte(o.edgeKey))
		require.NoError(t, err)
	}
	scfg, ccfg := peerauth.ServerConfig{Keys: keys}, peerauth.ClientConfig{Keys: edgeKeys}
	if o.insecure {
		scfg, ccfg = peerauth.ServerConfig{Insecure: true}, peerauth.ClientConfig{Insecure: true}
	}
	auth, err := peerauth.NewServer(scfg)
	require.NoError(t, err)
	client, err := peerauth.NewClient(ccfg)
	require.NoError(t, err)

	p := &pair{reg: prometheus.NewRegistry()}
	m := NewMetrics(p.reg)
	ka := o.keepalive
	if ka == 0 {
		ka = 2 * time.Second
	}
	sess := &tunnel.Config{Node: "origin", KeepaliveInterval: ka, KeepaliveTimeout: ka, Instance: o.instance}
	esess := &tunnel.Config{Node: "edge", KeepaliveInterval: ka, KeepaliveTimeout: ka}
	if o.codecs {
		list := testCodecs
		if o.codecList != nil {
			list = o.codecList
		}
		sess.Codecs, esess.Codecs = list(t), list(t)
		enc := o.encoding
		if enc == nil {
			enc, _ = codec.NewPolicy("token", 0)
		}
		sess.Encoding, esess.Encoding = enc, enc
		if o.stream {
			zs, err := codec.NewStreaming(codec.Options{})
			require.NoError(t, err)
			sess.StreamCodec, esess.StreamCodec = realStreamCodec{zs}, realStreamCodec{zs}
		}
		name := func(id uint8) string { return codec.ID(id).String() }
		sess.CodecName, esess.CodecName = name, name
	}
	var log *slog.Logger // QUIC_TEST_LOG=1 shows both sides' logs
	if os.Getenv("QUIC_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	p.srv = NewServer(ServerConfig{Session: sess, TLS: auth.TLSConfig(ALPN), Verify: auth.VerifyEdge, SequencedWindow: o.window, BulkWindow: o.bulkWindow, MaxStreams: o.maxStreams}, m, log,
		func(ctx context.Context, st *Stream) { (*p.handler.Load())(ctx, st) })
	echo := Handler(echoHandler)
	p.handler.Store(&echo)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	if o.delay > 0 || o.originFilter {
		p.originSock = &filterConn{PacketConn: pc}
		p.originSock.delay.Store(int64(o.delay))
		pc = p.originSock
	}
	served := make(chan error, 1)
	go func() { served <- p.srv.Serve(pc) }()
	p.peer = NewPeer(context.Background(), PeerConfig{
		Name: "origin", Address: pc.LocalAddr().String(), Session: esess, SequencedWindow: o.window, BulkWindow: o.bulkWindow, Redundancy: o.copies, Divert: o.divert,
		TLS:   func() *tls.Config { return client.TLSConfig(ALPN) },
		Prove: client.ProveEdge,
		ListenPacket: func() (net.PacketConn, error) {
			c, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil || o.plain {
				return c, err
			}
			fc := &filterConn{PacketConn: c}
			fc.delay.Store(int64(o.delay))
			p.edgeSock.Store(fc)
			return fc, nil
		},
	}, m, log)
	t.Cleanup(func() {
		_ = p.peer.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = p.srv.Shutdown(ctx)
		require.NoError(t, <-served)
	})
	return p
}

func (p *pair) setHandler(h Handler) { p.handler.Store(&h) }

// edgeConns returns the edge's live connections.
func (p *pair) edgeConns() []*conn {
	p.peer.mu.Lock()
	defer p.peer.mu.Unlock()
	return append([]*conn(nil), p.peer.conns...)
}

// echoHandler answers "echo:" + the request.
func echoHandler(_ context.Context, st *Stream) {
	defer st.Close()
	req, err := io.ReadAll(st)
	if err != nil {
		return
	}
	_, _ = st.Write(append([]byte("echo:"), req...))
	_ = st.CloseWrite()
}

// call runs one exchange and returns the response.
func (p *pair) call(ctx context.Context, req []byte) ([]byte, error) {
	st, err := p.peer.OpenStream(ctx)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = st.SetDeadline(dl)
	}
	if _, err := st.Write(req); err != nil {
		return nil, err
	}
	if err := st.CloseWrite(); err != nil {
		return nil, err
	}
	return io.ReadAll(st)
}

func (p *pair) counter(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := p.reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			if c := m.GetCounter(); c != nil {
				sum += c.GetValue()
			} else if g := m.GetGauge(); g != nil {
				sum += g.GetValue()
			}
		}
	}
	return sum
}

// soapMessage is a SOAP request of about n bytes, varying with i.
func soapMessage(i, n int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="utf-8"?><soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><GetQuote xmlns="urn:example:stock"><Call>%d</Call>`, i)
	for j := 0; b.Len() < n-60; j++ {
		fmt.Fprintf(&b, "<Symbol id=\"%d\">SYM%05d</Symbol>", j, (i*7+j)%100000)
	}
	b.WriteString(`</GetQuote></soap:Body></soap:Envelope>`)
	return b.Bytes()
}

var (
	_ = testutil.ToFloat64
	_ sync.Mutex
)

// holdSecondHalf makes the next coded message of n raw bytes leave in two writes, holding
// the second back (as a lost packet would) from when held closes until release is closed.
func holdSecondHalf(t testing.TB, n int) (held, release chan struct{}) {
	return holdMessage(t, n, 2)
}

// holdWhole holds back the whole next coded message of n raw bytes, as the loss of a
// one-packet message would, from when held closes until release is closed.
func holdWhole(t testing.TB, n int) (held, release chan struct{}) { return holdMessage(t, n, 1) }

// holdMessage sends the first (parts-1)/parts of the message and holds the rest.
func holdMessage(t testing.TB, n, parts int) (held, release chan struct{}) {
	held, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook := func(h head, msg []byte, w io.Writer) error {
		if h.Codec == 0 || h.RawLen != uint64(n) {
			_, err := w.Write(msg)
			return err
		}
		cut := len(msg) * (parts - 1) / parts
		if cut > 0 {
			if _, err := w.Write(msg[:cut]); err != nil {
				return err
			}
		}
		once.Do(func() { close(held) })
		<-release
		_, err := w.Write(msg[cut:])
		return err
	}
	testWriteHook.Store(&hook)
	t.Cleanup(func() { testWriteHook.Store(nil) })
	return held, release
}

// callAsync runs one exchange in the background; its error (or a wrong echo) comes on
// the channel.
func (p *pair) callAsync(ctx context.Context, req []byte) chan error {
	done := make(chan error, 1)
	go func() {
		resp, err := p.call(ctx, req)
		if err == nil && !bytes.Equal(resp, append([]byte("echo:"), req...)) {
			err = fmt.Errorf("the response to a %d-byte request is not its echo", len(req))
		}
		done <- err
	}()
	return done
}

// callConcurrently runs workers callers of calls exchanges each; caller w's call i sends
// msg(w, i) and must get its own echo back. It fails the test on any error.
// echoCalls makes n sequential calls of soapMessage(first+i, size) and checks each
// echoed answer byte for byte.
func (p *pair) echoCalls(t testing.TB, ctx context.Context, first, n, size int) {
	t.Helper()
	for i := range n {
		req := soapMessage(first+i, size)
		resp, err := p.call(ctx, req)
		require.NoError(t, err, "call %d", first+i)
		require.Equal(t, append([]byte("echo:"), req...), resp, "call %d", first+i)
	}
}

func (p *pair) callConcurrently(t testing.TB, ctx context.Context, workers, calls int, msg func(w, i int) []byte) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range calls {
				req := msg(w, i)
				resp, err := p.call(ctx, req)
				if err == nil && !bytes.Equal(resp, append([]byte("echo:"), req...)) {
					err = fmt.Errorf("worker %d call %d: response mixed up", w, i)
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
}
