package codec

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/testutil"
)

// TestZstdEncodersShareMemory: a zstd codec's encoders, however many (one per tunnel
// connection; on the UDP tunnel one per message coded at the same moment), share the
// library's block encoders (4 MiB each with the SOAP dictionary and a 1 MiB window). 32
// encoders made one each, with the library's default window, cost 350 MiB.
func TestZstdEncodersShareMemory(t *testing.T) {
	z, err := NewZstd(ZstdDictionary(builtinZstdDict))
	require.NoError(t, err)
	msg := []byte(`<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><addEntry><date>2026-11-28</date></addEntry></soap:Body></soap:Envelope>`)
	heap := testutil.HeapAlloc
	before := heap()
	var encoders []Encoder
	for range 32 {
		e, err := z.NewEncoder()
		require.NoError(t, err)
		_, err = e.Encode(nil, msg)
		require.NoError(t, err)
		encoders = append(encoders, e)
	}
	grown := heap() - before
	runtime.KeepAlive(encoders)
	t.Logf("32 zstd encoders with the dictionary: %.1f MiB", float64(grown)/(1<<20))
	require.Less(t, grown, uint64(sharedEncoders()+1)*5<<20, "encoders share their block encoders (4 MiB each)")
}

// TestZstdSharedEncoderConcurrent: encoders used at once from many goroutines give each
// message the frame one encoder alone gives it.
func TestZstdSharedEncoderConcurrent(t *testing.T) {
	z, err := NewZstd(ZstdDictionary(builtinZstdDict))
	require.NoError(t, err)
	msgs := make([][]byte, 64)
	want := make([][]byte, len(msgs))
	e, err := z.NewEncoder()
	require.NoError(t, err)
	for i := range msgs {
		msgs[i] = fmt.Appendf(nil, `<soap:Envelope><soap:Body><m%d>%s</m%d></soap:Body></soap:Envelope>`, i%7, bytes.Repeat([]byte{'a' + byte(i%26)}, i*37), i%7)
		want[i], err = e.Encode(nil, msgs[i])
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			e, err := z.NewEncoder()
			if !assertNoErr(t, err) {
				return
			}
			d, err := z.NewDecoder(Limits{MaxMessage: 1 << 20})
			if !assertNoErr(t, err) {
				return
			}
			for k := range 200 {
				i := (g*13 + k) % len(msgs)
				p, err := e.Encode(nil, msgs[i])
				if !assertNoErr(t, err) || !bytes.Equal(want[i], p) {
					t.Errorf("message %d: frame differs from the one encoder alone gives", i)
					return
				}
				got, err := d.Decode(nil, p)
				if !assertNoErr(t, err) || !bytes.Equal(msgs[i], got) {
					t.Errorf("message %d: round trip differs", i)
					return
				}
			}
		})
	}
	wg.Wait()
}

func assertNoErr(t *testing.T, err error) bool {
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}
