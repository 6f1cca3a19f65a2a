package ledger

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeRecord: decode never panics on what it finds in the file, reads every record
// as a state Begin knows how to answer, and reads back what encode wrote; a record of the
// earlier layout (no claim time) reads as claimed at its last change.
func FuzzDecodeRecord(f *testing.F) {
	now := time.Unix(1_790_000_000, 123_456_789)
	claimed := now.Add(-time.Second)
	for _, rec := range []Record{
		{State: Sending, Time: now, Claimed: now},
		{State: Sent, Time: now, Claimed: claimed},
		{State: Done, Time: now, Status: 202, Claimed: claimed},
		{State: Done, Time: now, Status: 65535, Claimed: claimed},
	} {
		f.Add(encode(rec))
		f.Add(encode(rec)[:legacyLen])
	}
	f.Add([]byte{})
	f.Add([]byte{byte(Done)})
	f.Add(append(encode(Record{State: Done, Time: now, Status: 200, Claimed: claimed}), "trailing"...))
	f.Add(encode(Record{State: 0xff, Time: now, Claimed: now}))
	f.Fuzz(func(t *testing.T, v []byte) {
		rec := decode(v)
		switch rec.State {
		case Sending, Sent, Done, InDoubt:
		default:
			t.Fatalf("decode(%x) = state %v", v, rec.State)
		}
		switch {
		case len(v) >= recordLen && rec.State != InDoubt:
			require.True(t, bytes.Equal(v[:recordLen], encode(rec)), "decode(%x) = %+v encodes differently", v, rec)
		case len(v) >= legacyLen && rec.State != InDoubt:
			require.True(t, bytes.Equal(v[:legacyLen], encode(rec)[:legacyLen]), "decode(%x) = %+v encodes differently", v, rec)
			require.True(t, rec.Claimed.Equal(rec.Time), "a record of the earlier layout is claimed at its last change")
		}
		if len(v) >= legacyLen {
			// The same fields as a record of each stored state: encode then decode gives
			// them back.
			ns, status := int64(binary.BigEndian.Uint64(v[1:9])), int(binary.BigEndian.Uint16(v[9:11]))
			claimedNs := ns
			if len(v) >= recordLen {
				claimedNs = int64(binary.BigEndian.Uint64(v[11:19]))
			}
			for _, s := range []State{Sending, Sent, Done} {
				want := Record{State: s, Time: time.Unix(0, ns), Status: status, Claimed: time.Unix(0, claimedNs)}
				got := decode(encode(want))
				require.Equal(t, want.State, got.State)
				require.True(t, want.Time.Equal(got.Time))
				require.Equal(t, want.Status, got.Status)
				require.True(t, want.Claimed.Equal(got.Claimed))
			}
		}
	})
}
