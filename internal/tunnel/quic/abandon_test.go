package quic

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestUDPOriginLearnsEdgeAbandon: an edge that gives up on an exchange before its
// response began (its client went away) tells the origin, whose AfterFail's f runs, so
// the origin stops an upstream call nobody waits for; a completed exchange never runs it.
// Both with the token codec on, whose lanes must stay in step: the next calls are coded
// and answered whole.
func TestUDPOriginLearnsEdgeAbandon(t *testing.T) {
	const abandonWait = 10 * time.Second
	for _, codecs := range []bool{false, true} {
		t.Run(map[bool]string{false: "identity", true: "token"}[codecs], func(t *testing.T) {
			p := newPair(t, pairOptions{codecs: codecs})
			abandoned := make(chan bool, 4)
			waiting := make(chan struct{}, 1)
			p.setHandler(func(_ context.Context, st *Stream) {
				defer st.Close()
				req, err := io.ReadAll(st)
				if err != nil {
					return
				}
				if string(req) == "<slow/>" {
					failed := make(chan struct{})
					st.AfterFail(func() { close(failed) })
					waiting <- struct{}{}
					select { // the server thinks until the edge gives up (bounded)
					case <-failed:
						abandoned <- true
					case <-time.After(abandonWait):
						abandoned <- false
					}
					return
				}
				stop := st.AfterFail(func() { abandoned <- true })
				_, _ = st.Write(append([]byte("echo:"), req...))
				_ = st.CloseWrite()
				if !stop() {
					abandoned <- true // AfterFail's f ran
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 2*abandonWait)
			defer cancel()
			got, err := p.call(ctx, soapMessage(1, 400))
			require.NoError(t, err)
			require.Equal(t, append([]byte("echo:"), soapMessage(1, 400)...), got)

			st, err := p.peer.OpenStream(ctx)
			require.NoError(t, err)
			_, err = st.Write([]byte("<slow/>"))
			require.NoError(t, err)
			require.NoError(t, st.CloseWrite())
			// The origin has the request once its handler waits; then the edge gives up.
			select {
			case <-waiting:
			case <-ctx.Done():
				t.Fatal("the slow request never reached the origin's handler")
			}
			require.NoError(t, st.Close())
			select {
			case ok := <-abandoned:
				require.True(t, ok, "the origin was never told the edge abandoned the exchange")
			case <-ctx.Done():
				t.Fatal("no answer from the handler")
			}

			for i := range 5 {
				req := soapMessage(10+i, 400)
				got, err := p.call(ctx, req)
				require.NoError(t, err)
				require.Equal(t, append([]byte("echo:"), req...), got)
			}
			select {
			case <-abandoned:
				t.Fatal("a completed exchange looked abandoned")
			default:
			}
		})
	}
}

// The instance the origin names in a connection's HELLO reaches the edge's streams on it:
// a resume tells the origin which process had the request (proxy/instance.go).
func TestUDPStreamNamesPeerInstance(t *testing.T) {
	p := newPair(t, pairOptions{instance: func() string { return "3fa2.120034" }})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := p.peer.OpenStream(ctx)
	require.NoError(t, err)
	defer st.Close()
	require.Equal(t, "3fa2.120034", st.PeerInstance())
}

// TestUDPOriginLearnsEdgeStopsReading: an edge that stops reading a response that
// streams (its client went away half-way) tells the origin with STOP_SENDING, and the
// origin's AfterFail f runs. An exchange whose response goes whole (coded) watches no
// STOP_SENDING: the watch costs a context per exchange, and there is nothing left to stop
// by then. (An identity response streams as it is written, and is watched.)
func TestUDPOriginLearnsEdgeStopsReading(t *testing.T) {
	const wait = 10 * time.Second
	p := newPair(t, pairOptions{codecs: true})
	abandoned := make(chan bool, 4)
	watched := make(chan bool, 4)
	p.setHandler(func(_ context.Context, st *Stream) {
		defer st.Close()
		req, err := io.ReadAll(st)
		if err != nil {
			return
		}
		failed := make(chan struct{})
		stop := st.AfterFail(func() { close(failed) })
		if string(req) != "<stream/>" {
			_, _ = st.Write(append([]byte("echo:"), req...))
			_ = st.CloseWrite()
			st.failMu.Lock()
			watched <- st.stopWatch != nil
			st.failMu.Unlock()
			stop()
			return
		}
		// A response that streams: its head and first bytes go now, the rest never (the
		// server thinks until the edge gives up, bounded).
		_, _ = st.Write([]byte("<part/>"))
		if err := st.Flush(); err != nil {
			abandoned <- false
			return
		}
		select {
		case <-failed:
			abandoned <- true
		case <-time.After(wait):
			abandoned <- false
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*wait)
	defer cancel()

	got, err := p.call(ctx, soapMessage(1, 400))
	require.NoError(t, err)
	require.Equal(t, append([]byte("echo:"), soapMessage(1, 400)...), got)
	require.False(t, <-watched, "a response sent whole started a STOP_SENDING watch")

	st, err := p.peer.OpenStream(ctx)
	require.NoError(t, err)
	_, err = st.Write([]byte("<stream/>"))
	require.NoError(t, err)
	require.NoError(t, st.CloseWrite())
	part := make([]byte, len("<part/>"))
	_, err = io.ReadFull(st, part) // the response began: the edge has its head
	require.NoError(t, err)
	require.Equal(t, "<part/>", string(part))
	require.NoError(t, st.Close()) // stops reading: STOP_SENDING, not ABANDON
	select {
	case ok := <-abandoned:
		require.True(t, ok, "the origin was never told the edge stopped reading")
	case <-ctx.Done():
		t.Fatal("no answer from the handler")
	}
}
