package tunnel

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAfterDelivered: f runs once the peer acknowledged decoding the stream's coded
// message — registered before or after the message left — and never for an identity
// message or one the peer rejected (it got it again as identity, unacknowledged).
func TestAfterDelivered(t *testing.T) {
	testConnTypes(t, func(t *testing.T, pair connPair) {
		fc := &faultCodec{onDecode: map[int]fault{3: faultDecodeError}} // the 3rd coded message is rejected
		scfg := codecConfig("origin", 0)
		scfg.Codecs = []MessageCodec{fc}
		c, s := sessionPair(t, pair, codecConfig("edge", 0), scfg)
		echoServer(t, s)
		identity := EncodingFunc(func([]byte, func(uint8) bool) uint8 { return 0 })
		cases := []struct {
			name      string
			encoding  Encoding // nil: the session's (delta)
			early     bool     // register before CloseWrite
			delivered bool
		}{
			{"coded, registered early", nil, true, true},
			{"coded, registered after", nil, false, true},
			{"rejected and resent", nil, false, false},
			{"identity", identity, true, false},
			{"coded after them", nil, true, true},
		}
		ran := make([]atomic.Int32, len(cases))
		for i, tc := range cases {
			st, err := c.OpenStream(context.Background())
			require.NoError(t, err)
			if tc.encoding != nil {
				st.SetEncoding(tc.encoding)
			}
			register := func() { st.AfterDelivered(func() { ran[i].Add(1) }) }
			if tc.early {
				register()
			}
			msg := testMsg(200+i, i)
			_, err = st.Write(msg)
			require.NoError(t, err)
			require.NoError(t, st.CloseWrite())
			got, err := io.ReadAll(st)
			require.NoError(t, err, tc.name)
			require.True(t, bytes.Equal(append([]byte("re:"), msg...), got), tc.name)
			if !tc.early {
				register()
			}
			require.NoError(t, st.Close())
		}
		// Acknowledgements are cumulative and in order: once the last is in, every
		// earlier message's is too.
		last := len(cases) - 1
		require.Eventually(t, func() bool { return ran[last].Load() == 1 }, 5*time.Second, time.Millisecond)
		for i, tc := range cases {
			want := int32(0)
			if tc.delivered {
				want = 1
			}
			require.Equal(t, want, ran[i].Load(), tc.name)
		}
	})
}

// TestWholeMessageSurvivesLostConnection: a message that arrived whole is still read
// whole after its connection is lost (the origin may have forgotten its copy once the
// edge's session acknowledged it); one cut short fails with the connection's error.
func TestWholeMessageSurvivesLostConnection(t *testing.T) {
	for _, whole := range []bool{true, false} {
		name := map[bool]string{true: "whole", false: "cut"}[whole]
		t.Run(name, func(t *testing.T) {
			c, s := sessionPair(t, tcpPair, &Config{Node: "edge"}, &Config{Node: "origin"})
			resp := testMsg(5000, 1)
			sent := make(chan struct{})
			go func() {
				st, err := s.AcceptStream(context.Background())
				if err != nil {
					return
				}
				// The response does not wait for the request's end (an early answer), so
				// the stream stays open on this side and the connection's loss reaches it.
				_, _ = io.ReadFull(st, make([]byte, len("request")))
				if whole {
					_, _ = st.Write(resp)
					_ = st.CloseWrite()
				} else {
					_, _ = st.Write(resp[:1000])
					_ = st.Flush()
				}
				close(sent)
			}()
			st, err := c.OpenStream(context.Background())
			require.NoError(t, err)
			_, err = st.Write([]byte("request"))
			require.NoError(t, err)
			require.NoError(t, st.Flush())
			<-sent
			// Wait until this side has every byte the peer sent, unread.
			require.Eventually(t, func() bool {
				st.mu.Lock()
				defer st.mu.Unlock()
				n := 0
				for _, ch := range st.chunks {
					n += len(ch.data)
				}
				return n == 1000 || st.rdone
			}, 5*time.Second, time.Millisecond)
			require.NoError(t, s.Close()) // the peer goes away: this side loses the connection
			<-c.Done()
			got, err := io.ReadAll(st)
			if whole {
				require.NoError(t, err)
				require.True(t, bytes.Equal(resp, got), "the whole response, byte for byte")
			} else {
				require.True(t, errors.Is(err, ErrSessionClosed), "cut short: %v", err)
			}
		})
	}
}
