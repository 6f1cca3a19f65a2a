package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func startReplay(t *testing.T, scenarios ...string) (*ReplayServer, map[string]*Scenario) {
	t.Helper()
	srv, err := StartReplayServer(loopbackSite{"server"}, 0)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	out := map[string]*Scenario{}
	for _, name := range scenarios {
		s, err := LoadScenario(name, 6, 1)
		require.NoError(t, err)
		srv.Add(s)
		out[name] = s
	}
	return srv, out
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestReplayRoundTripsEveryScenario(t *testing.T) {
	srv, sc := startReplay(t, "stress", "charging", "fixml-5", "weather-detailed")
	target := Target{Site: loopbackSite{"client"}, Addr: srv.Addr().String(), Host: srv.Addr().String()}
	for name, s := range sc {
		for i := range s.Calls {
			require.NoError(t, CallOnce(callCtx(t), target, s, i), "%s call %d", name, i)
		}
	}
	req, bad := srv.Counts()
	require.EqualValues(t, 24, req)
	require.Zero(t, bad)
}

// tamper is a TCP proxy that applies f to the whole response it relays.
func tamper(t *testing.T, upstream string, f func([]byte) []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", upstream)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { _, _ = io.Copy(u, c) }()
				resp, _ := io.ReadAll(u)
				_, _ = c.Write(f(resp))
			}()
		}
	}()
	return ln.Addr().String()
}

func TestCallOnceDetectsAChangedByte(t *testing.T) {
	srv, sc := startReplay(t, "stress")
	s := sc["stress"]
	addr := tamper(t, srv.Addr().String(), func(b []byte) []byte {
		b = bytes.Clone(b)
		b[len(b)-10] ^= 0x20 // flip a letter's case near the end of the body
		return b
	})
	err := CallOnce(callCtx(t), Target{Site: loopbackSite{"client"}, Addr: addr, Host: addr}, s, 2)
	require.ErrorIs(t, err, ErrMismatch)
	require.ErrorContains(t, err, "first difference at byte 454")
}

func TestReplayRefusesAChangedRequest(t *testing.T) {
	srv, sc := startReplay(t, "deploy")
	s := sc["deploy"]
	// Send call 1's header with call 2's body: the server must notice.
	other := &Scenario{Name: s.Name, spec: s.spec, Calls: []Call{s.Calls[0], {Request: s.Calls[2].Request, Response: s.Calls[1].Response}}}
	err := CallOnce(callCtx(t), Target{Site: loopbackSite{"client"}, Addr: srv.Addr().String(), Host: "x"}, other, 1)
	require.ErrorIs(t, err, ErrMismatch)
	require.ErrorContains(t, err, "status 500")
	require.ErrorContains(t, err, "request body differs")
	_, bad := srv.Counts()
	require.EqualValues(t, 1, bad)
}

func TestReplayUnknownExchange(t *testing.T) {
	srv, _ := startReplay(t, "stress")
	for _, key := range []string{"", "stress", "stress/x", "stress/99", "nope/1"} {
		req := "POST / HTTP/1.0\r\n" + CallHeader + ": " + key + "\r\nContent-Length: 1\r\n\r\nx"
		c, err := net.Dial("tcp", srv.Addr().String())
		require.NoError(t, err)
		_, err = c.Write([]byte(req))
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		c.Close()
		require.Equal(t, 500, resp.StatusCode, key)
		require.True(t, strings.HasPrefix(string(body), "replay: "), string(body))
	}
}

func TestVerify(t *testing.T) {
	want := []byte("<a>hello</a>")
	require.NoError(t, verify(200, "", want, want))
	for _, tc := range []struct {
		status int
		enc    string
		body   string
		msg    string
	}{
		{500, "", "<a>hello</a>", "status 500"},
		{200, "gzip", "<a>hello</a>", "Content-Encoding"},
		{200, "", "<a>hellO</a>", "first difference at byte 7"},
		{200, "", "<a>hello</a>\n", "want 12"},
		{200, "", "", "0 bytes"},
	} {
		err := verify(tc.status, tc.enc, []byte(tc.body), want)
		require.True(t, errors.Is(err, ErrMismatch))
		require.ErrorContains(t, err, tc.msg)
	}
}

func TestCallOnceTransportErrorIsNotAMismatch(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	s, err := LoadScenario("stress", 1, 1)
	require.NoError(t, err)
	err = CallOnce(callCtx(t), Target{Site: loopbackSite{"client"}, Addr: addr, Host: addr}, s, 0)
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrMismatch)
}
