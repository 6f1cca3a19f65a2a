package codec

import (
	"strconv"
	"testing"
)

// coldSink keeps the cache-evicting writes of BenchmarkTokenColdCache from being dropped.
var coldSink byte

// BenchmarkTokenColdCache codes the Stress family's tunnel messages (heads included) with
// the token codec, one op being a request encoded and decoded, after writing through
// evict bytes of other memory between messages (untimed), as a gateway does between two
// messages of one connection: other connections' codec state, TLS, the HTTP legs, the
// runtime. It shows how much of the codec's cost in a gateway is its state being cold in
// the cache. On the 2-core Xeon of docs/benchmarks.md (2 MiB L2 per core) an op took
// 5.8 µs warm, 8.4 with 1 MiB evicted, 13.5 with 4 MiB: the 2.3 to 3 times that the
// gateways' own timing shows under bench cpu (soapgw_tunnel_codec_seconds: an encode of
// 7.3 µs, a decode of 3.7 µs at the edge at 16 clients). A smaller or denser model state,
// fewer cache lines touched per message, is what would bring that down (issue 19).
//
//	go test -run '^$' -bench BenchmarkTokenColdCache -benchtime 20000x ./internal/codec/
func BenchmarkTokenColdCache(b *testing.B) {
	c, err := NewToken()
	if err != nil {
		b.Fatal(err)
	}
	reqs, _ := tunnelMessages("stress", 2*22000) // a request and a response per call
	warm, msgs := reqs[:2000], reqs[2000:]       // beyond 20,000 ops messages come again
	for _, evict := range []int{0, 256 << 10, 1 << 20, 4 << 20} {
		b.Run("evict="+strconv.Itoa(evict>>10)+"KiB", func(b *testing.B) {
			enc, dec := codecPair(b, c)
			var payload, out []byte
			for _, m := range warm {
				if payload, err = enc.Encode(payload[:0], m); err != nil {
					b.Fatal(err)
				}
				if out, err = dec.Decode(out[:0], payload); err != nil {
					b.Fatal(err)
				}
			}
			junk := make([]byte, evict)
			b.SetBytes(int64(len(msgs[0])))
			b.ResetTimer()
			for i := range b.N {
				if evict > 0 {
					b.StopTimer()
					for j := 0; j < len(junk); j += 64 {
						junk[j]++
					}
					b.StartTimer()
				}
				m := msgs[i%len(msgs)]
				if payload, err = enc.Encode(payload[:0], m); err != nil {
					b.Fatal(err)
				}
				if out, err = dec.Decode(out[:0], payload); err != nil {
					b.Fatal(err)
				}
				if len(out) != len(m) {
					b.Fatal("round trip differs")
				}
			}
			b.StopTimer()
			if evict > 0 {
				coldSink += junk[evict/2]
			}
		})
	}
}
