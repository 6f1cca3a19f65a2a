package ledger

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeRecord: decode never panics on what it finds in the file, reads every record
// as a state Begin knows how to answer, and reads back what encode wrote.
func FuzzDecodeRecord(f *testing.F) {
	now := time.Unix(1_790_000_000, 123_456_789)
	for _, rec := range []Record{
		{State: Sending, Time: now},
		{State: Sent, Time: now},
		{State: Done, Time: now, Status: 202},
		{State: Done, Time: now, Status: 65535},
	} {
		f.Add(encode(rec))
	}
	f.Add([]byte{})
	f.Add([]byte{byte(Done)})
	f.Add(append(encode(Record{State: Done, Time: now, Status: 200}), "trailing"...))
	f.Add(encode(Record{State: 0xff, Time: now}))
	f.Fuzz(func(t *testing.T, v []byte) {
		rec := decode(v)
		switch rec.State {
		case Sending, Sent, Done, InDoubt:
		default:
			t.Fatalf("decode(%x) = state %v", v, rec.State)
		}
		if len(v) >= 11 && rec.State != InDoubt {
			require.True(t, bytes.Equal(v[:11], encode(rec)), "decode(%x) = %+v encodes differently", v, rec)
		}
		if len(v) >= 11 {
			// The same fields as a record of each stored state: encode then decode gives
			// them back.
			ns, status := int64(binary.BigEndian.Uint64(v[1:9])), int(binary.BigEndian.Uint16(v[9:11]))
			for _, s := range []State{Sending, Sent, Done} {
				want := Record{State: s, Time: time.Unix(0, ns), Status: status}
				got := decode(encode(want))
				require.Equal(t, want.State, got.State)
				require.True(t, want.Time.Equal(got.Time))
				require.Equal(t, want.Status, got.Status)
			}
		}
	})
}
