package e2e

import (
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEdgeRejectsNonSOAP: requests only a forward proxy is sent (CONNECT, absolute- and
// authority-form targets), HTTP/1.1 without Host and a malformed chunked body get the
// documented Fault from the real edge (a SOAP 1.1 Fault: status 500, the HTTP-semantic
// 4xx in X-Soapgw-Status, soap:Client); neither the upstream nor a listener standing
// in for another host sees a connection.
func TestEdgeRejectsNonSOAP(t *testing.T) {
	srv := taUpstream(t)
	other, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer other.Close()
	var reached atomic.Int32
	go func() {
		for {
			c, err := other.Accept()
			if err != nil {
				return
			}
			reached.Add(1)
			_ = c.Close()
		}
	}()
	victim := other.Addr().String()
	a, _, _ := startPair(t, srv.URL())

	const body = "<soap:Envelope xmlns:soap=\"http://schemas.xmlsoap.org/soap/envelope/\"><soap:Body><x/></soap:Body></soap:Envelope>"
	cl := "Content-Length: " + strconv.Itoa(len(body)) + "\r\n"
	for _, tc := range []struct {
		name, raw, status, cause string
	}{
		{"CONNECT", "CONNECT " + victim + " HTTP/1.1\r\nHost: " + victim + "\r\n\r\n", "405", "bad_request_target"},
		{"absolute-form", "POST http://" + victim + "/svc HTTP/1.1\r\nHost: " + victim + "\r\nContent-Type: text/xml\r\n" + cl + "\r\n" + body, "400", "bad_request_target"},
		{"authority-form", "POST " + victim + " HTTP/1.1\r\nHost: x\r\n" + cl + "\r\n" + body, "400", "bad_request_target"},
		{"missing Host", "POST /svc HTTP/1.1\r\nContent-Type: text/xml\r\n" + cl + "\r\n" + body, "400", "bad_request_target"},
		{"duplicate Host", "POST /svc HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Type: text/xml\r\n" + cl + "\r\n" + body, "400", "bad_request"},
		{"malformed chunked", "POST /svc HTTP/1.1\r\nHost: x\r\nContent-Type: text/xml\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n<soap\r\nzz\r\n", "400", "malformed_body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := string(rawExchange(t, a.Edge, []byte(tc.raw), 10*time.Second))
			require.True(t, strings.HasPrefix(resp, "HTTP/1.1 500 "), "%q", resp)
			require.Contains(t, resp, "X-Soapgw-Status: "+tc.status+"\r\n")
			require.Contains(t, resp, "X-Soapgw-Error: "+tc.cause+"\r\n")
			require.Contains(t, resp, "<faultcode>soap:Client</faultcode>")
			require.Contains(t, resp, "<faultstring>", "a SOAP Fault the client's stack can parse")
		})
	}
	require.Empty(t, srv.Requests(), "nothing reached the upstream")
	require.Zero(t, reached.Load(), "the edge connected to the other host")

	// A SOAP request right after, on a new connection, is served byte for byte.
	_, err = taCall(a.Edge, "after")
	require.NoError(t, err)
}
