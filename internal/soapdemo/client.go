package soapdemo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxResponseBody bounds what CallHTTP10 reads, so a broken peer cannot
// make the load client buffer without limit.
const maxResponseBody = 16 << 20

// CallHTTP10 makes one call the way a legacy HTTP/1.0 client (Apache Axis
// 1.0) does: it opens a new TCP connection to addr, sends the whole request
// in a single write, reads the response until Content-Length bytes or the
// server's close, and closes the connection. It returns the status code and
// body; a non-2xx status is not an error (a SOAP Fault comes with 500).
//
// The request is "POST path HTTP/1.0", or "GET" when body is nil, followed
// by hdr in the given order and unchanged: nothing is added except a
// Content-Length when a body is sent and hdr has none. Header names and
// values must not contain CR or LF.
//
// ctx bounds the whole call: when it is done (cancelled or past its
// deadline) a call in progress is aborted with an error wrapping ctx.Err().
func CallHTTP10(ctx context.Context, addr string, path string, body []byte, hdr [][2]string) (status int, respBody []byte, err error) {
	req, err := appendHTTP10Request(nil, path, body, hdr)
	if err != nil {
		return 0, nil, fmt.Errorf("soapdemo: call %s%s: %w", addr, path, err)
	}
	defer func() {
		if err != nil {
			if ctx.Err() != nil {
				// The I/O error is only the symptom of the cancellation.
				err = ctx.Err()
			}
			err = fmt.Errorf("soapdemo: call %s%s: %w", addr, path, err)
		}
	}()

	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, nil, err
	}
	defer conn.Close()
	// When ctx is done, a deadline in the past unblocks a pending Read or
	// Write at once. This covers ctx's own deadline too; copying it onto
	// the socket instead would race with ctx and report a bare timeout.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	if _, err := conn.Write(req); err != nil {
		return 0, nil, fmt.Errorf("writing request: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, nil, fmt.Errorf("reading response header: %w", err)
	}
	defer resp.Body.Close()
	respBody, err = io.ReadAll(io.LimitReader(resp.Body, maxResponseBody+1))
	if err != nil {
		return 0, nil, fmt.Errorf("reading response body: %w", err)
	}
	if len(respBody) > maxResponseBody {
		return 0, nil, fmt.Errorf("response body over %d bytes", maxResponseBody)
	}
	return resp.StatusCode, respBody, nil
}

var errHeaderInjection = errors.New("header field contains CR or LF")

// appendHTTP10Request appends the request CallHTTP10 sends.
func appendHTTP10Request(b []byte, path string, body []byte, hdr [][2]string) ([]byte, error) {
	method := "POST"
	if body == nil {
		method = "GET"
	}
	if strings.ContainsAny(path, "\r\n ") {
		return nil, fmt.Errorf("path %q: contains a space, CR or LF", path)
	}
	b = append(b, method...)
	b = append(b, ' ')
	b = append(b, path...)
	b = append(b, " HTTP/1.0\r\n"...)
	hasLength := false
	for _, f := range hdr {
		if strings.ContainsAny(f[0], "\r\n") || strings.ContainsAny(f[1], "\r\n") {
			return nil, fmt.Errorf("header %q: %w", f[0], errHeaderInjection)
		}
		hasLength = hasLength || strings.EqualFold(f[0], "Content-Length")
		b = append(b, f[0]...)
		b = append(b, ": "...)
		b = append(b, f[1]...)
		b = append(b, "\r\n"...)
	}
	if body != nil && !hasLength {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(body)), 10)
		b = append(b, "\r\n"...)
	}
	b = append(b, "\r\n"...)
	return append(b, body...), nil
}
