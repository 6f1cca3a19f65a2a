package tunnel

import (
	"context"
	"io"
	"net"
	"testing"
)

// BenchmarkExchange1KB is one 1 KB request/response exchange over net.Pipe, as identity
// and through a trivial coded codec (the payload is the message), so the difference is
// the cost of whole-message buffering, the coded path and acknowledgements.
func BenchmarkExchange1KB(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  func() *Config
	}{
		{"identity", func() *Config { return &Config{KeepaliveInterval: 0} }},
		{"coded", func() *Config {
			return &Config{KeepaliveInterval: 0, Codecs: []MessageCodec{copyCodec{}}, Encoding: Prefer(0, copyID)}
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cc, sc := net.Pipe()
			ch := make(chan *Session, 1)
			go func() {
				s, err := ServerSession(context.Background(), sc, bc.cfg(), nil)
				if err != nil {
					b.Error(err)
				}
				ch <- s
			}()
			c, err := ClientSession(context.Background(), cc, bc.cfg(), nil, "bench")
			if err != nil {
				b.Fatal(err)
			}
			s := <-ch
			defer c.Close()
			defer s.Close()
			go func() {
				for {
					st, err := s.AcceptStream(context.Background())
					if err != nil {
						return
					}
					req, _ := io.ReadAll(st)
					_, _ = st.Write(req)
					_ = st.CloseWrite()
					st.Close()
				}
			}()
			msg := make([]byte, 1024)
			buf := make([]byte, 2048)
			b.ReportAllocs()
			b.SetBytes(2 * 1024)
			for b.Loop() {
				st, err := c.OpenStream(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				if _, err := st.Write(msg); err != nil {
					b.Fatal(err)
				}
				if err := st.CloseWrite(); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(st, buf[:1024]); err != nil {
					b.Fatal(err)
				}
				if _, err := st.Read(buf); err != io.EOF {
					b.Fatalf("want EOF, got %v", err)
				}
				st.Close()
			}
		})
	}
}
