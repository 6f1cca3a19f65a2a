package soapdemo

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// rawServer accepts connections on loopback and runs handle on each.
func rawServer(t *testing.T, handle func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(4 * time.Second))
				handle(c)
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

// readRequest reads one request (head and Content-Length body) raw.
func readRequest(r *bufio.Reader) ([]byte, error) {
	req, err := http.ReadRequest(r)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	return body, nil
}

// TestCallHTTP10Wire checks the exact bytes a Stress call puts on the wire
// and that they arrive in one segment (one write).
func TestCallHTTP10Wire(t *testing.T) {
	got := make(chan []byte, 1)
	addr := rawServer(t, func(c net.Conn) {
		b := make([]byte, 4096)
		n, _ := c.Read(b) // one write on loopback arrives in one read
		got <- b[:n]
		_, _ = io.WriteString(c, "HTTP/1.0 200 OK\r\n\r\nok")
	})
	status, body, err := CallHTTP10(callCtx(t), addr, StressPath, StressRequest(3), StressRequestHeaders("localhost:8080"))
	require.NoError(t, err)
	require.Equal(t, 200, status)
	require.Equal(t, "ok", string(body))

	want := "POST /axis/services/Calendar HTTP/1.0\r\n" +
		"Content-Type: text/xml; charset=utf-8\r\n" +
		"Accept: application/soap+xml, application/dime, multipart/related, text/*\r\n" +
		"User-Agent: Axis/1.0\r\n" +
		"Host: localhost:8080\r\n" +
		"Cache-Control: no-cache\r\n" +
		"Pragma: no-cache\r\n" +
		"SOAPAction: \"\"\r\n" +
		"Content-Length: 652\r\n" +
		"\r\n" + string(StressRequest(3))
	require.Equal(t, want, string(<-got))
	require.Len(t, want, 931, "documented on StressRequest")
}

func TestCallHTTP10ResponseFraming(t *testing.T) {
	tests := []struct {
		name      string
		request   [][2]string // nil: no headers
		body      []byte
		response  string
		keepOpen  bool // the server does not close after responding
		wantBody  string
		wantCode  int
		wantInReq string
	}{
		{"read to close", nil, []byte("x"), "HTTP/1.0 200 OK\r\n\r\nuntil close", false, "until close", 200, "Content-Length: 1\r\n"},
		{"content length, server keeps conn", nil, []byte("x"), "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", true, "hello", 200, "POST /p HTTP/1.0\r\n"},
		{"fault status", nil, []byte("x"), "HTTP/1.0 500 Internal Server Error\r\nContent-Length: 5\r\n\r\nfault", false, "fault", 500, "POST"},
		{"GET without body", [][2]string{{"Host", "h"}}, nil, "HTTP/1.0 200 OK\r\n\r\nwsdl", false, "wsdl", 200, "GET /p HTTP/1.0\r\nHost: h\r\n\r\n"},
		{"explicit length kept", [][2]string{{"content-length", "1"}}, []byte("x"), "HTTP/1.0 204 No Content\r\n\r\n", false, "", 204, "content-length: 1\r\n\r\nx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqs := make(chan string, 1)
			release := make(chan struct{})
			addr := rawServer(t, func(c net.Conn) {
				br := bufio.NewReader(c)
				raw := make([]byte, 4096)
				n, _ := br.Read(raw)
				reqs <- string(raw[:n])
				_, _ = io.WriteString(c, tt.response)
				if tt.keepOpen {
					<-release
				}
			})
			defer close(release)
			status, body, err := CallHTTP10(callCtx(t), addr, "/p", tt.body, tt.request)
			require.NoError(t, err)
			require.Equal(t, tt.wantCode, status)
			require.Equal(t, tt.wantBody, string(body))
			require.Contains(t, <-reqs, tt.wantInReq)
		})
	}
}

func TestCallHTTP10Errors(t *testing.T) {
	hang := rawServer(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	garbage := rawServer(t, func(c net.Conn) {
		_, _ = readRequest(bufio.NewReader(c))
		_, _ = io.WriteString(c, "SSH-2.0-OpenSSH\r\n")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := ln.Addr().String()
	require.NoError(t, ln.Close())

	tests := []struct {
		name    string
		addr    string
		hdr     [][2]string
		ctx     func() (context.Context, context.CancelFunc)
		wantIs  error
		wantMsg string
	}{
		{"deadline", hang, nil, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(t.Context(), 50*time.Millisecond)
		}, context.DeadlineExceeded, ""},
		{"cancel", hang, nil, func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(50*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled, ""},
		{"refused", refused, nil, nil, nil, "connection refused"},
		{"not HTTP", garbage, nil, nil, nil, "reading response header"},
		{"header injection", hang, [][2]string{{"X", "a\r\nEvil: 1"}}, nil, errHeaderInjection, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
			if tt.ctx != nil {
				ctx, cancel = tt.ctx()
			}
			defer cancel()
			start := time.Now()
			_, _, err := CallHTTP10(ctx, tt.addr, "/p", []byte("x"), tt.hdr)
			require.Error(t, err)
			require.Less(t, time.Since(start), 2*time.Second)
			if tt.wantIs != nil {
				require.ErrorIs(t, err, tt.wantIs)
			}
			require.ErrorContains(t, err, tt.wantMsg)
			require.ErrorContains(t, err, "soapdemo: call "+tt.addr+"/p")
		})
	}
}

// TestRunCallsThroughHandler runs part of the scenario concurrently against
// the service and checks every response belongs to its call.
func TestRunCallsThroughHandler(t *testing.T) {
	addr := newStressServer(t)
	hdr := StressRequestHeaders(addr)
	lat, err := RunCalls(callCtx(t), 100, 4, func(ctx context.Context, i int) error {
		status, body, err := CallHTTP10(ctx, addr, StressPath, StressRequest(i), hdr)
		if err != nil {
			return err
		}
		if status != http.StatusOK || string(body) != string(StressResponse(i)) {
			return errors.New("call " + strconv.Itoa(i) + ": wrong response " + strconv.Itoa(status) + " " + string(body))
		}
		return nil
	})
	require.NoError(t, err)
	require.Len(t, lat, 100)
	s := Summarize(lat)
	require.Equal(t, 100, s.N)
	require.Positive(t, s.Min)
}
