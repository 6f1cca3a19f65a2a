package quic

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/tunnel"
)

// TestUDPBulkStreamsLeaveRoom: bulk streams (one-way deliveries) take a connection's
// streams only up to tunnel.BulkLimit of the origin's limit (less the control stream);
// past it a bulk open waits
// for a stream to end, while ordinary exchanges still open at once and run.
func TestUDPBulkStreamsLeaveRoom(t *testing.T) {
	const maxStreams = 16
	p := newPair(t, pairOptions{maxStreams: maxStreams})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := p.call(ctx, []byte("up")) // the connection is up, the origin's HELLO in
	require.NoError(t, err)

	limit := int(tunnel.BulkLimit(maxStreams)) - 1 // QUIC's credit counts the control stream too
	var bulk []*Stream
	for range limit {
		st, err := p.peer.OpenBulkStream(ctx)
		require.NoError(t, err)
		require.True(t, st.bulk, "opened as bulk")
		bulk = append(bulk, st)
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = p.peer.OpenBulkStream(short)
	cancelShort()
	require.ErrorIs(t, err, tunnel.ErrStreamLimit, "no bulk stream beyond the bulk limit")

	waited := make(chan error, 1)
	go func() {
		st, err := p.peer.OpenBulkStream(ctx)
		if err == nil {
			_ = st.Close()
		}
		waited <- err
	}()
	got, err := p.call(ctx, []byte("urgent"))
	require.NoError(t, err, "an ordinary exchange opens and runs beside a full bulk share")
	require.Equal(t, "echo:urgent", string(got))
	select {
	case err := <-waited:
		t.Fatalf("a bulk stream opened beyond the bulk limit (err %v)", err)
	default:
	}

	// One bulk exchange ends: the waiting bulk open takes its place.
	_, err = bulk[0].Write([]byte("bulk"))
	require.NoError(t, err)
	require.NoError(t, bulk[0].CloseWrite())
	answer, err := io.ReadAll(bulk[0])
	require.NoError(t, err)
	require.Equal(t, "echo:bulk", string(answer))
	require.NoError(t, bulk[0].Close())
	require.NoError(t, <-waited, "the waiting bulk open took the freed stream")
	for _, st := range bulk[1:] {
		_ = st.Close()
	}
}
