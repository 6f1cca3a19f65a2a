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
	require.NoError(t, verify(200, 200, "", want, want))
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
		err := verify(tc.status, 200, tc.enc, []byte(tc.body), want)
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

func TestVerifyOneWay(t *testing.T) {
	require.NoError(t, verify(202, 202, "", nil, nil))
	err := verify(200, 202, "", nil, nil)
	require.ErrorIs(t, err, ErrMismatch, "a one-way call answered 200 is not what the server said")
	require.ErrorContains(t, err, "status 200")
	require.ErrorIs(t, verify(202, 202, "", []byte("x"), nil), ErrMismatch)
}

// TestReplayOneWay: the server answers a one-way call 202 Accepted with an empty body,
// and records the arrival of each tracked call once.
func TestReplayOneWay(t *testing.T) {
	srv, sc := startReplay(t, "stress-oneway", "stress")
	s := sc["stress-oneway"]
	target := Target{Site: loopbackSite{"client"}, Addr: srv.Addr().String(), Host: srv.Addr().String()}

	// The raw answer: 202, Content-Length 0, no body.
	c, err := net.Dial("tcp", srv.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write(appendRequest(nil, "HTTP/1.0", s.spec.Path, s.requestHeaders("x", 0), s.Calls[0].Request))
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	require.Equal(t, "0", resp.Header.Get("Content-Length"))
	require.Empty(t, body)

	a := srv.Track("stress-oneway", 2, 3) // calls 2, 3, 4
	before := time.Now()
	for i := 1; i < len(s.Calls); i++ { // 1 and 5 lie outside the record
		require.NoError(t, CallOnce(callCtx(t), target, s, i), "call %d", i)
	}
	require.NoError(t, CallOnce(callCtx(t), target, sc["stress"], 3), "another scenario's call 3 is not this record's")
	require.Zero(t, a.Wait(callCtx(t), []int{2, 3, 4}, time.Minute))
	n, last, dups, _ := a.Received(0, 10)
	require.Equal(t, 3, n)
	require.Zero(t, dups)
	require.False(t, last.Before(before))
	n, _, _, _ = a.Received(3, 4)
	require.Equal(t, 1, n)

	// A call that arrives again is a duplicate.
	require.NoError(t, CallOnce(callCtx(t), target, s, 3))
	_, _, dups, first := a.Received(0, 10)
	require.Equal(t, 1, dups)
	require.Equal(t, 3, first)

	srv.Untrack("stress-oneway", a)
	require.NoError(t, CallOnce(callCtx(t), target, s, 4))
	_, _, dups, _ = a.Received(0, 10)
	require.Equal(t, 1, dups, "no longer recorded")
}

// TestArrivalsWait: Wait reports the calls that have not arrived when its limit passes,
// and stops early when the server refuses a call of the scenario (a one-way call refused
// at the server never arrives).
func TestArrivalsWait(t *testing.T) {
	srv, sc := startReplay(t, "stress-oneway")
	s := sc["stress-oneway"]
	a := srv.Track(s.Name, 0, len(s.Calls))
	target := Target{Site: loopbackSite{"client"}, Addr: srv.Addr().String(), Host: "x"}
	require.NoError(t, CallOnce(callCtx(t), target, s, 0))
	require.Equal(t, 2, a.Wait(callCtx(t), []int{0, 1, 2}, 10*time.Millisecond))

	done := make(chan int, 1)
	go func() { done <- a.Wait(callCtx(t), []int{0, 1}, time.Minute) }()
	bad := &Scenario{Name: s.Name, spec: s.spec, Calls: []Call{s.Calls[0], {Request: s.Calls[2].Request}}}
	require.ErrorIs(t, CallOnce(callCtx(t), target, bad, 1), ErrMismatch)
	select {
	case missing := <-done:
		require.Equal(t, 1, missing)
	case <-callCtx(t).Done():
		t.Fatal("Wait did not end when the server refused a call")
	}
}
