package tunnel

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStreamDoneOnPeerReset: the origin has read the whole request (Read keeps returning
// io.EOF) and waits on its upstream; when the edge abandons the exchange, AfterFail's f
// tells it. A clean exchange never runs it.
func TestStreamDoneOnPeerReset(t *testing.T) {
	testConnTypes(t, func(t *testing.T, pair connPair) {
		c, s := sessionPair(t, pair, nil, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()

		// Clean: request, response, both read whole.
		cst, err := c.OpenStream(ctx)
		require.NoError(t, err)
		_, err = cst.Write([]byte("req"))
		require.NoError(t, err)
		require.NoError(t, cst.CloseWrite())
		sst, err := s.AcceptStream(ctx)
		require.NoError(t, err)
		cleanFailed := make(chan struct{})
		stopClean := sst.AfterFail(func() { close(cleanFailed) })
		got, err := io.ReadAll(sst)
		require.NoError(t, err)
		require.Equal(t, "req", string(got))
		_, err = sst.Write([]byte("resp"))
		require.NoError(t, err)
		require.NoError(t, sst.CloseWrite())
		got, err = io.ReadAll(cst)
		require.NoError(t, err)
		require.Equal(t, "resp", string(got))
		require.NoError(t, cst.Close())
		require.NoError(t, sst.Close())
		select {
		case <-cleanFailed:
			t.Fatal("AfterFail ran after a clean exchange")
		default:
		}
		require.True(t, stopClean(), "AfterFail's f stopped before it ran")

		// Abandoned: the request was read whole, then the edge resets the stream.
		cst, err = c.OpenStream(ctx)
		require.NoError(t, err)
		_, err = cst.Write([]byte("req"))
		require.NoError(t, err)
		require.NoError(t, cst.CloseWrite())
		sst, err = s.AcceptStream(ctx)
		require.NoError(t, err)
		defer sst.Close()
		_, err = io.ReadAll(sst)
		require.NoError(t, err)
		failed := make(chan struct{})
		stopFailed := sst.AfterFail(func() { close(failed) })
		require.NoError(t, cst.Close()) // unfinished: RST_STREAM
		select {
		case <-failed:
		case <-ctx.Done():
			t.Fatal("AfterFail's f not run after the peer reset the stream")
		}
		require.False(t, stopFailed(), "f ran")
		var rp interface{ ResetByPeer() bool }
		require.True(t, errors.As(sst.Err(), &rp) && rp.ResetByPeer(), "Err after the edge's reset: %v", sst.Err())
		_, err = sst.Read(make([]byte, 1))
		require.ErrorIs(t, err, io.EOF, "the request itself stays complete")
		require.Error(t, sst.CloseWrite(), "the response cannot be sent")

		// A stream that failed before anyone asked still reports it.
		cst, err = c.OpenStream(ctx)
		require.NoError(t, err)
		require.NoError(t, cst.CloseWrite())
		sst, err = s.AcceptStream(ctx)
		require.NoError(t, err)
		sst.Reset(0, "local")
		late := make(chan struct{})
		sst.AfterFail(func() { close(late) })
		select {
		case <-late:
		case <-ctx.Done():
			t.Fatal("AfterFail's f not run for a stream that failed before")
		}
		require.False(t, errors.As(sst.Err(), &rp) && rp.ResetByPeer(), "a local reset is not the peer's: %v", sst.Err())
		_ = cst.Close()

		// The connection lost: AfterFail, and Err says it was not the peer's reset (the
		// origin keeps such an exchange running for the edge to collect).
		cst, err = c.OpenStream(ctx)
		require.NoError(t, err)
		_, err = cst.Write([]byte("req"))
		require.NoError(t, err)
		require.NoError(t, cst.CloseWrite())
		sst, err = s.AcceptStream(ctx)
		require.NoError(t, err)
		_, err = io.ReadAll(sst)
		require.NoError(t, err)
		lost := make(chan struct{})
		sst.AfterFail(func() { close(lost) })
		require.NoError(t, c.Close())
		select {
		case <-lost:
		case <-ctx.Done():
			t.Fatal("AfterFail's f not run after the connection was lost")
		}
		require.Error(t, sst.Err())
		require.False(t, errors.As(sst.Err(), &rp) && rp.ResetByPeer(), "a lost connection is not a reset: %v", sst.Err())
	})
}

// The instance a side names in HELLO reaches the other side's streams on that
// connection: a resume tells the origin which process had the request
// (proxy/instance.go). A side that names none leaves it empty.
func TestStreamPeerInstance(t *testing.T) {
	c, s := sessionPair(t, tcpPair, &Config{Node: "edge"}, &Config{Node: "origin", Instance: func() string { return "3fa2.120034" }})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.OpenStream(ctx)
	require.NoError(t, err)
	defer st.Close()
	_, err = st.Write([]byte("x"))
	require.NoError(t, err)
	require.NoError(t, st.Flush())
	require.Equal(t, "3fa2.120034", st.PeerInstance())
	ss, err := s.AcceptStream(ctx)
	require.NoError(t, err)
	defer ss.Close()
	require.Equal(t, "", ss.PeerInstance())
}
