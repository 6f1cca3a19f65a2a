package quic

import (
	"encoding/binary"
	"testing"

	quicgo "github.com/quic-go/quic-go"
	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

// idStream is a streamIO with a stream id and nothing else.
type idStream struct {
	streamIO
	id quicgo.StreamID
}

func (s idStream) StreamID() quicgo.StreamID { return s.id }

// TestUDPHaveTracking: an origin tracks responses for HAVE only when its edge said it
// sends HAVE; at most haveTrackMax of them (the oldest go, and stay held for the window
// as before); a HAVE tells the streams it lists and forgets them; ids it does not track
// are ignored; a malformed one is a protocol error.
func TestUDPHaveTracking(t *testing.T) {
	stream := func(c *conn, id int) *Stream { return &Stream{c: c, qs: idStream{id: quicgo.StreamID(id)}} }

	old := &conn{peer: frame.Hello{}}
	old.awaitHave(stream(old, 4))
	require.Empty(t, old.haveWaits.byID, "an edge that sends no HAVE: nothing tracked")

	c := &conn{peer: frame.Hello{Have: true}, m: unregistered.conn("", nil)}
	told := map[int]bool{}
	var streams []*Stream
	const extra = 5
	for i := range haveTrackMax + extra {
		st := stream(c, 4*i)
		st.delivered.Then(func() { told[4*i] = true })
		streams = append(streams, st)
		c.awaitHave(st)
	}
	require.Len(t, c.haveWaits.byID, haveTrackMax, "bounded")
	require.NotContains(t, c.haveWaits.byID, quicgo.StreamID(0), "the oldest went first")
	require.Less(t, len(c.haveWaits.order), 2*haveTrackMax, "its queue is bounded too")

	var p []byte
	for _, id := range []int{0, 4 * extra, 4 * (haveTrackMax + extra - 1), 999_999} {
		p = binary.AppendUvarint(p, uint64(id))
	}
	require.NoError(t, c.onHave(p))
	require.Equal(t, map[int]bool{4 * extra: true, 4 * (haveTrackMax + extra - 1): true}, told,
		"those tracked are told; one dropped for the bound is not, nor an unknown id")
	require.Len(t, c.haveWaits.byID, haveTrackMax-2)

	require.ErrorIs(t, c.onHave([]byte{0x80}), ErrBadHead)
}

// FuzzHave: any HAVE payload is read whole or refused as ErrBadHead; never a panic.
func FuzzHave(f *testing.F) {
	f.Add(binary.AppendUvarint(binary.AppendUvarint(nil, 4), 300))
	f.Add([]byte{0x80})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, p []byte) {
		c := &conn{peer: frame.Hello{Have: true}, m: unregistered.conn("", nil)}
		c.awaitHave(&Stream{c: c, qs: idStream{id: 4}})
		if err := c.onHave(p); err != nil {
			require.ErrorIs(t, err, ErrBadHead)
		}
	})
}
