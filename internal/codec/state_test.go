package codec

import (
	"runtime"
	"testing"

	"github.com/soapgw/soapgw/internal/trafficgen"
)

// maxTokenState is the bound of issue 19 on the token codec's state per tunnel connection
// at one gateway, after warm-up, at default settings.
const maxTokenState = 1 << 20

// TestTokenStatePerConnection measures what the token codec keeps per tunnel connection.
// A gateway holds, per connection, the encoder of what it sends and the decoder of what it
// receives: the edge a request encoder and a response decoder, the origin the reverse. For
// each family of the corpus (whole tunnel messages, heads included), eight such pairs code
// the family's requests and responses three times over, and the live heap they hold
// (HeapAlloc after forced collections with the pairs held, less after they are released,
// over the number of pairs) must stay within maxTokenState at both gateways.
//
// The log also gives, per direction, the payload bytes of the first pass and the state of
// both ends of that direction (its encoder and its decoder): the edge's state is about
// the mean of the request and response rows.
//
//	go test -run TestTokenStatePerConnection -v ./internal/codec/
func TestTokenStatePerConnection(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("codes the corpus 40 times over (3 minutes under the race detector)")
	}
	c, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	var mixedReqs, mixedResps [][]byte
	for _, fam := range trafficgen.Families {
		reqs, resps := tunnelMessages(fam, familyRun(fam))
		if fam != "edge" {
			mixedReqs, mixedResps = append(mixedReqs, reqs...), append(mixedResps, resps...)
		}
		for _, d := range []struct {
			dir  string
			msgs [][]byte
		}{{trafficgen.Request, reqs}, {trafficgen.Response, resps}} {
			state, coded := tokenPairState(t, c, d.msgs, d.msgs)
			t.Logf("%-26s %5d msgs  %9d B (%7.2f B/msg)  state of its encoder+decoder %6.0f KiB",
				fam+"-"+d.dir, len(d.msgs), coded, float64(coded)/float64(max(len(d.msgs), 1)), state/1024)
		}
		edge, _ := tokenPairState(t, c, reqs, resps)
		origin, _ := tokenPairState(t, c, resps, reqs)
		t.Logf("%-26s per connection: edge %6.0f KiB, origin %6.0f KiB", fam, edge/1024, origin/1024)
		for _, g := range []struct {
			name  string
			state float64
		}{{"edge", edge}, {"origin", origin}} {
			if g.state > maxTokenState {
				t.Errorf("%s at the %s: %.0f KiB per connection after warm-up, limit %d KiB",
					fam, g.name, g.state/1024, maxTokenState>>10)
			}
		}
	}
	// Every family through one connection, one after the other: more names, values and
	// contexts than any one service's traffic. Reported, not bounded. The edge cases stay
	// out: sent last, their one-off names and values evict most of what the others left,
	// and the figure would drop to a third.
	edge, _ := tokenPairState(t, c, mixedReqs, mixedResps)
	origin, _ := tokenPairState(t, c, mixedResps, mixedReqs)
	t.Logf("%-26s per connection: edge %6.0f KiB, origin %6.0f KiB (not bounded)", "all but edge, in turn", edge/1024, origin/1024)
}

// tokenPairState returns the live heap per pair of an encoder that has coded encMsgs
// three times and a decoder that has decoded decMsgs three times (coded by an encoder of
// the peer's, not counted), and the encoder's payload bytes of its first pass. Eight
// pairs are measured together, so what the measurement itself allocates weighs an eighth.
func tokenPairState(t *testing.T, c Codec, encMsgs, decMsgs [][]byte) (state float64, coded int) {
	t.Helper()
	const pairs, passes = 8, 3
	encs := make([]Encoder, pairs)
	decs := make([]Decoder, pairs)
	var payload, out []byte
	for k := range pairs {
		var err error
		if encs[k], err = c.NewEncoder(); err != nil {
			t.Fatal(err)
		}
		if decs[k], err = c.NewDecoder(Limits{}); err != nil {
			t.Fatal(err)
		}
		peer, err := c.NewEncoder()
		if err != nil {
			t.Fatal(err)
		}
		for pass := range passes {
			for _, m := range encMsgs {
				if payload, err = encs[k].Encode(payload[:0], m); err != nil {
					t.Fatal(err)
				}
				if k == 0 && pass == 0 {
					coded += len(payload)
				}
			}
			for i, m := range decMsgs {
				if payload, err = peer.Encode(payload[:0], m); err != nil {
					t.Fatal(err)
				}
				if out, err = decs[k].Decode(out[:0], payload); err != nil || len(out) != len(m) {
					t.Fatalf("message %d does not round-trip: %v", i, err)
				}
			}
		}
	}
	payload, out = nil, nil
	// The pairs are measured by letting them go: the live heap while a package variable
	// holds them, less the live heap once it no longer does. Nothing else changes in
	// between, so the difference is theirs alone.
	stateSink = []any{encs, decs}
	encs, decs = nil, nil
	held := liveHeap()
	stateSink = nil
	released := liveHeap()
	return float64(int64(held)-int64(released)) / pairs, coded
}

var stateSink []any

// liveHeap is the heap in use after two forced collections (the second frees what the
// first's finalizers and sweeps left).
func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
