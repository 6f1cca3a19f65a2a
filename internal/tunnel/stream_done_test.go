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

// TestAnswerOutlivesThePeersReset: the origin answers a request it has not read whole
// (the server answered early), then closes the stream, which resets it. The edge's next
// write fails with a reset by the peer, and the answer, which arrived whole before the
// reset, still reads byte for byte. At the origin a request the edge reset is not kept:
// the edge abandoned it.
func TestAnswerOutlivesThePeersReset(t *testing.T) {
	testConnTypes(t, func(t *testing.T, pair connPair) {
		c, s := sessionPair(t, pair, nil, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()

		cst, err := c.OpenStream(ctx)
		require.NoError(t, err)
		defer cst.Close()
		_, err = cst.Write(make([]byte, 100<<10)) // more than one DATA frame
		require.NoError(t, err)
		require.NoError(t, cst.Flush())
		sst, err := s.AcceptStream(ctx)
		require.NoError(t, err)
		_, err = sst.Read(make([]byte, 10))
		require.NoError(t, err)
		_, err = sst.Write([]byte("413 early"))
		require.NoError(t, err)
		require.NoError(t, sst.CloseWrite())
		sent := make(chan struct{})
		sst.AfterSent(func() { close(sent) })
		// As the origin waits (proxy.discardRefused): a reset queued sooner overtakes it.
		<-sent
		require.NoError(t, sst.Close()) // the request unfinished: RST_STREAM

		var rp interface{ ResetByPeer() bool }
		for err == nil { // until the reset arrives
			_, err = cst.Write(make([]byte, 1<<10))
			if err == nil {
				err = cst.Flush()
			}
		}
		require.True(t, errors.As(err, &rp) && rp.ResetByPeer(), "the write failed, not by the peer's reset: %v", err)
		got, err := io.ReadAll(cst)
		require.NoError(t, err, "the answer that came whole before the reset was dropped")
		require.Equal(t, "413 early", string(got))

		// The other way: the origin has the whole request unread when the edge resets.
		cst2, err := c.OpenStream(ctx)
		require.NoError(t, err)
		_, err = cst2.Write([]byte("req"))
		require.NoError(t, err)
		require.NoError(t, cst2.CloseWrite())
		sst2, err := s.AcceptStream(ctx)
		require.NoError(t, err)
		defer sst2.Close()
		failed := make(chan struct{})
		sst2.AfterFail(func() { close(failed) })
		for { // until the request is there whole
			sst2.mu.Lock()
			done := sst2.rdone
			sst2.mu.Unlock()
			if done {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatal("the request never arrived")
			case <-time.After(time.Millisecond):
			}
		}
		require.NoError(t, cst2.Close())
		<-failed
		_, err = io.ReadAll(sst2)
		require.True(t, errors.As(err, &rp) && rp.ResetByPeer(), "the origin read a request the edge abandoned: %v", err)
	})
}
