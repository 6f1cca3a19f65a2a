package spool

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDeleteManyAndOldest: delivered messages leave in one commit, missing seqs are
// skipped, and Stats.Oldest follows the oldest message still pending.
func TestDeleteManyAndOldest(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "spool.db"), Limits{})
	require.NoError(t, err)
	defer s.Close()
	var msgs []Message
	for range 5 {
		m, err := s.Put("p", "u", func(id string) []byte { return []byte("message " + id) })
		require.NoError(t, err)
		msgs = append(msgs, m)
	}
	require.Equal(t, msgs[0].Accepted, s.Stats().Oldest)
	require.NoError(t, s.DeleteMany([]uint64{msgs[0].Seq, msgs[2].Seq, 999}))
	st := s.Stats()
	require.Equal(t, 3, st.Messages)
	require.Equal(t, int64(3*len(msgs[1].Data)), st.Bytes)
	require.Equal(t, msgs[1].Accepted, st.Oldest, "the oldest left")
	var left []uint64
	require.NoError(t, s.Pending(0, func(m Message) bool { left = append(left, m.Seq); return true }))
	require.Equal(t, []uint64{msgs[1].Seq, msgs[3].Seq, msgs[4].Seq}, left)
	require.NoError(t, s.DeleteMany([]uint64{msgs[1].Seq, msgs[3].Seq, msgs[4].Seq}))
	st = s.Stats()
	require.Zero(t, st.Messages)
	require.Zero(t, st.Bytes)
	require.True(t, st.Oldest.IsZero())
}
