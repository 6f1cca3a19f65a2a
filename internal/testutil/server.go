package testutil

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// RawServer serves every connection it accepts with serve, each on a goroutine of its own
// with a minute's deadline, and closes it after: an HTTP server written byte by byte, for
// tests whose point is how a server behaves (answers early, stalls, authenticates
// connections). It returns the listen address. Cleanup closes the listener, runs release
// (a gate's open, for handlers waiting on it) and waits for the handlers.
func RawServer(t testing.TB, serve func(c net.Conn, br *bufio.Reader), release ...func()) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		for _, r := range release {
			r()
		}
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(time.Minute))
				serve(c, bufio.NewReader(c))
			}()
		}
	}()
	return ln.Addr().String()
}

// Gate is a channel a server's handlers wait on until the test opens it; open may be
// called more than once (pass it to RawServer too, so cleanup never waits on it).
func Gate() (wait <-chan struct{}, open func()) {
	ch := make(chan struct{})
	var once sync.Once
	return ch, func() { once.Do(func() { close(ch) }) }
}

// NTLMServer is a RawServer that authenticates connections the way IIS runs NTLM:
// "Authorization: NTLM T1" gets a challenge, "Authorization: NTLM T3-<user>" on the same
// connection after it authenticates the connection, and every later request on it runs as
// that user, with or without credentials (200, body "<hello>user</hello>"). Anything
// else gets a 401 challenge for NTLM. Requests need a Content-Length (or none: no body).
func NTLMServer(t testing.TB) string {
	return RawServer(t, func(c net.Conn, br *bufio.Reader) {
		user, challenged := "", false
		for {
			auth, n := "", 0
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				if line == "\r\n" {
					break
				}
				name, v, _ := strings.Cut(line, ":")
				switch v = strings.TrimSpace(v); strings.ToLower(name) {
				case "content-length":
					n, _ = strconv.Atoi(v)
				case "authorization":
					auth = v
				}
			}
			if _, err := io.CopyN(io.Discard, br, int64(n)); err != nil {
				return
			}
			answer := "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: NTLM\r\nContent-Length: 0\r\n\r\n"
			switch {
			case auth == "NTLM T1":
				user, challenged = "", true
				answer = "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: NTLM CHALLENGE\r\nContent-Length: 0\r\n\r\n"
			case strings.HasPrefix(auth, "NTLM T3-") && challenged:
				user, challenged = strings.TrimPrefix(auth, "NTLM T3-"), false
			case auth == "" && user != "":
			default:
				user, challenged = "", false
			}
			if user != "" {
				body := "<hello>" + user + "</hello>"
				answer = "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
			}
			if _, err := io.WriteString(c, answer); err != nil {
				return
			}
		}
	})
}
