package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/soapdemo"
)

// lockedBuffer is a bytes.Buffer safe for a command writing while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startExampleServer runs `soapgw example-server` in this process on a free loopback
// port and returns its URL; the server is stopped (as by a signal) at cleanup, and must
// then exit 0.
func startExampleServer(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb lockedBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"example-server", "--listen", "127.0.0.1:0"}, &out, &errb, func() {})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-exited:
			require.Equal(t, exitOK, code, errb.String())
			require.Contains(t, errb.String(), "example-server: stopped")
		case <-time.After(15 * time.Second):
			t.Error("example-server did not stop")
		}
	})
	re := regexp.MustCompile(`on (http://127\.0\.0\.1:\d+)` + regexp.QuoteMeta(soapdemo.StressPath))
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m[1] + soapdemo.StressPath
		}
		select {
		case code := <-exited:
			t.Fatalf("example-server exited with %d: %s", code, errb.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	t.Fatalf("example-server printed no address: %q %q", out.String(), errb.String())
	return ""
}

func TestExampleServerServesStress(t *testing.T) {
	u := startExampleServer(t)
	addr := strings.TrimPrefix(strings.TrimSuffix(u, soapdemo.StressPath), "http://")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, i := range []int{0, 7, 17471} {
		status, body, err := soapdemo.CallHTTP10(ctx, addr, soapdemo.StressPath, soapdemo.StressRequest(i), soapdemo.StressRequestHeaders(addr))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, soapdemo.StressResponse(i), body)
	}
	resp, err := http.Get(u + "?wsdl")
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestExampleLoadAgainstServer(t *testing.T) {
	u := startExampleServer(t)

	t.Run("calls", func(t *testing.T) {
		code, out, stderr := runCLI(t, "example-load", "--url", u, "--calls", "40", "--concurrency", "4")
		require.Equal(t, exitOK, code, stderr)
		require.Regexp(t, `(?m)^example-load: done after \S+: 40 calls \(\S+/s\), 40 ok, 0 wrong, 0 errors; p50 \S+ p90 \S+ p99 \S+ max \S+$`, out)
	})
	t.Run("path defaults to the Stress path", func(t *testing.T) {
		code, out, stderr := runCLI(t, "example-load", "--url", strings.TrimSuffix(u, soapdemo.StressPath), "-n", "3")
		require.Equal(t, exitOK, code, stderr)
		require.Contains(t, out, soapdemo.StressPath+" (")
		require.Contains(t, out, "3 calls")
	})
	t.Run("rate paces the calls", func(t *testing.T) {
		start := time.Now()
		code, out, stderr := runCLI(t, "example-load", "--url", u, "--calls", "6", "--rate", "50", "--concurrency", "3", "--wait", "5s")
		require.Equal(t, exitOK, code, stderr)
		require.Contains(t, out, "6 ok, 0 wrong, 0 errors")
		// Six calls at 50/s: the sixth starts 100 ms after the first.
		require.GreaterOrEqual(t, time.Since(start), 90*time.Millisecond)
	})
	t.Run("duration bounds the run and summaries are periodic", func(t *testing.T) {
		start := time.Now()
		code, out, stderr := runCLI(t, "example-load", "--url", u, "--duration", "400ms", "--rate", "40", "--interval", "100ms")
		require.Equal(t, exitOK, code, stderr)
		require.Less(t, time.Since(start), 5*time.Second)
		require.GreaterOrEqual(t, strings.Count(out, " in the last "), 2, out)
		require.Regexp(t, `done after \S+: \d+ calls \(\S+/s\), \d+ ok, 0 wrong, 0 errors`, out)
		require.NotContains(t, out, "done after 0s: 0 calls")
	})
}

func TestExampleLoadDetectsWrongResponses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		want    string
	}{
		{"different body", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/xml")
			_, _ = w.Write(soapdemo.StressResponse(12345))
		}, "body differs"},
		{"fault status", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "fault", http.StatusInternalServerError)
		}, "status 500"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			code, out, stderr := runCLI(t, "example-load", "--url", srv.URL, "--calls", "4")
			require.Equal(t, exitFailure, code, stderr)
			require.Contains(t, out, "4 calls")
			require.Contains(t, out, "0 ok, 4 wrong, 0 errors")
			require.Contains(t, stderr, tc.want)
			require.Contains(t, stderr, "4 of 4 calls failed")
		})
	}
}

func TestExampleLoadConnectionErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now

	code, out, stderr := runCLI(t, "example-load", "--url", "http://"+addr+"/", "--calls", "2", "--timeout", "2s")
	require.Equal(t, exitFailure, code, stderr)
	require.Contains(t, out, "0 ok, 0 wrong, 2 errors")

	code, _, stderr = runCLI(t, "example-load", "--url", "http://"+addr+"/", "--calls", "2", "--wait", "300ms")
	require.Equal(t, exitFailure, code, stderr)
	require.Contains(t, stderr, "no correct response from "+addr+" within --wait 300ms")
}

func TestExampleServerPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	code, _, stderr := runCLI(t, "example-server", "--listen", ln.Addr().String())
	require.Equal(t, exitFailure, code, stderr)
	require.Contains(t, stderr, "address already in use")
}

func TestExampleUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{"load without url", []string{"example-load"}, "--url URL is required"},
		{"load both bounds", []string{"example-load", "--url", "http://127.0.0.1:1/", "--calls", "3", "--duration", "1s"}, "not both"},
		{"load https", []string{"example-load", "--url", "https://127.0.0.1:1/"}, "plain HTTP"},
		{"load no host", []string{"example-load", "--url", "/axis"}, "want http://host"},
		{"load negative rate", []string{"example-load", "--url", "http://127.0.0.1:1/", "--rate", "-1"}, "not negative"},
		{"load zero concurrency", []string{"example-load", "--url", "http://127.0.0.1:1/", "--concurrency", "0"}, "must be positive"},
		{"load stray argument", []string{"example-load", "--url", "http://127.0.0.1:1/", "more"}, "accepts 0 arg"},
		{"load bad flag value", []string{"example-load", "--url", "http://127.0.0.1:1/", "--calls", "many"}, "invalid argument"},
		{"server empty listen", []string{"example-server", "--listen", ""}, "--listen must not be empty"},
		{"server bad port", []string{"example-server", "--listen", "127.0.0.1:99999"}, "port must be a number"},
		{"server no port", []string{"example-server", "--listen", "127.0.0.1"}, "missing port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tc.args...)
			require.Equal(t, exitUsage, code, stderr)
			require.Contains(t, stderr, tc.stderr)
		})
	}
}
