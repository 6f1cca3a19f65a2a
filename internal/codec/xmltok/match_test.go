package xmltok

import (
	"bytes"
	"testing"

	"github.com/soapgw/soapgw/internal/trafficgen"
	"github.com/stretchr/testify/require"
)

// northwindResponses returns DataSet responses of the Northwind family:
// the first rows of one slowly changing Orders table.
func northwindResponses(t *testing.T, n int) [][]byte {
	t.Helper()
	rs := byDir(trafficgen.Family("northwind", 2*n, trafficgen.DefaultSeed))[trafficgen.Response]
	require.Len(t, rs, n)
	return rs
}

// TestMatchRepeatedDataSet: once a DataSet has been sent, sending it
// again costs a few bytes, one changed cell a few more, and a longer or
// shorter cut of the same table little more than its new rows.
func TestMatchRepeatedDataSet(t *testing.T) {
	rs := northwindResponses(t, 3)
	p := newPair(Options{})
	first := p.roundTrip(t, rs[0])
	again := p.roundTrip(t, rs[0])
	t.Logf("first %d bytes of %d, again %d", first, len(rs[0]), again)
	require.Less(t, again, 16, "an identical DataSet")

	changed := bytes.Replace(bytes.Clone(rs[0]), []byte("<ShipVia>1</ShipVia>"), []byte("<ShipVia>9</ShipVia>"), 1)
	require.NotEqual(t, changed, rs[0])
	one := p.roundTrip(t, changed)
	require.Less(t, one, 32, "a DataSet with one changed cell")

	// The next responses of the family are other cuts of the table, a
	// pending order shipped or a freight corrected in between.
	for _, r := range rs[1:] {
		n := p.roundTrip(t, r)
		t.Logf("next cut: %d bytes of %d (%.3f%%)", n, len(r), 100*float64(n)/float64(len(r)))
		require.Less(t, n, 100, "another cut of a table already sent")
	}
}

// TestMatchHistoryBounded: with a dictionary budget far below one
// DataSet, the history rings grow to their bounds and wrap inside every
// message; messages still round-trip, the ends stay in step, and memory
// stays within the budget, whose ring sizes are rounded down to powers of
// two (wrapping is a mask).
func TestMatchHistoryBounded(t *testing.T) {
	rs := northwindResponses(t, 2)
	for _, tc := range []struct {
		dictBytes         int
		histMax, arenaMax int
	}{
		{16 << 10, 4 << 10, 4 << 10},
		{40<<10 + 5, 8 << 10, 4 << 10}, // 10 KiB and 5 KiB, rounded down
		{1 << 20, 256 << 10, 128 << 10},
	} {
		p := newPair(Options{DictBytes: tc.dictBytes})
		for range 2 {
			for _, r := range rs {
				p.roundTrip(t, r)
			}
		}
		for _, h := range []*history{&p.enc.m.hist, &p.dec.m.hist} {
			require.Equal(t, tc.histMax, h.histMax)
			require.Equal(t, tc.arenaMax, h.arenaMax)
			require.Equal(t, h.histMax, h.histCap, "a DataSet grows the record ring to its bound")
			require.Equal(t, h.arenaMax, h.arenaCap, "a DataSet grows the value arena to its bound")
			require.Len(t, h.ring, h.histCap)
			require.Len(t, h.arena, h.arenaCap)
			if tc.dictBytes < 1<<20 {
				require.Greater(t, h.pos, uint64(4*h.histCap))
			}
		}
	}
}

// TestMatchHistorySmall: a connection of small messages keeps the
// history rings at their first size, however long it runs.
func TestMatchHistorySmall(t *testing.T) {
	for _, fam := range []string{"stress", "wsa", "fixml"} {
		msgs := byDir(trafficgen.Family(fam, 2000, trafficgen.DefaultSeed))[trafficgen.Request]
		p := newPair(Options{})
		for range 3 {
			for _, m := range msgs {
				p.roundTrip(t, m)
			}
		}
		for _, h := range []*history{&p.enc.m.hist, &p.dec.m.hist} {
			require.Equal(t, ringMin, h.histCap, fam)
			require.Equal(t, ringMin, h.arenaCap, fam)
			require.Greater(t, h.pos, uint64(4*h.histCap), "%s: the record ring never wrapped", fam)
		}
	}
}

// TestRegrow: a grown ring holds every byte of the old ring's window at
// the same position, and nothing below it.
func TestRegrow(t *testing.T) {
	for _, pos := range []uint64{0, 5, 16, 21, 40, 1<<32 + 3} {
		r := make([]byte, 16)
		for p := pos - min(pos, 16); p < pos; p++ {
			r[p&15] = byte(p)
		}
		g, lo := regrow(r, pos, 0)
		require.Len(t, g, 32)
		require.Equal(t, pos-min(pos, 16), lo)
		for p := lo; p < pos; p++ {
			require.Equal(t, byte(p), g[p&31], "pos %d, byte %d", pos, p)
		}
	}
	// A floor above the window's start stays.
	_, lo := regrow(make([]byte, 16), 40, 30)
	require.Equal(t, uint64(30), lo)
}

// TestMatchResyncAfterInsert: a row inserted in the middle of a repeated
// DataSet costs about what the row itself costs, not the rest of the
// table: the pointer finds its way back on the next row's values.
func TestMatchResyncAfterInsert(t *testing.T) {
	rs := northwindResponses(t, 1)
	d := rs[0]
	i := bytes.Index(d, []byte(`<Orders diffgr:id="Orders100"`))
	j := bytes.Index(d, []byte(`<Orders diffgr:id="Orders101"`))
	require.True(t, i > 0 && j > i)
	row := bytes.ReplaceAll(bytes.Clone(d[i:j]), []byte("Orders100"), []byte("Orders100b"))
	inserted := append(append(append([]byte{}, d[:j]...), row...), d[j:]...)

	p := newPair(Options{})
	p.roundTrip(t, d)
	n := p.roundTrip(t, inserted)
	t.Logf("inserted row of %d bytes: payload %d bytes", len(row), n)
	require.Less(t, n, 80)
}
