package soapdemo

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// element returns the bytes from the first "<"+open to the end of the
// matching "</"+open+">" in b.
func element(t *testing.T, b []byte, name string) []byte {
	t.Helper()
	start := bytes.Index(b, []byte("<"+name))
	end := bytes.Index(b, []byte("</"+name+">"))
	require.True(t, start >= 0 && end > start, "no <%s> element in %s", name, b)
	return b[start : end+len("</"+name+">")]
}

func wellFormed(t *testing.T, b []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			return
		}
		require.NoError(t, err, "%s", b)
	}
}

func TestStressSizes(t *testing.T) {
	// Every call of the scenario, and a few indices past it.
	indices := []int{StressCalls, 99999, 100000, -1}
	for i := range StressCalls {
		indices = append(indices, i)
	}
	for _, i := range indices {
		req, resp := StressRequest(i), StressResponse(i)
		if len(req) != StressRequestSize || len(resp) != StressResponseSize {
			t.Fatalf("call %d: request %d bytes (want %d), response %d bytes (want %d)",
				i, len(req), StressRequestSize, len(resp), StressResponseSize)
		}
	}
	req, resp := StressRequest(42), StressResponse(42)
	require.Len(t, element(t, req, "entry"), StressRequestDocSize)
	require.Len(t, element(t, resp, "ns1:addEntryResponse"), StressResponseDocSize)
	wellFormed(t, req)
	wellFormed(t, resp)

	// The paper's figures.
	require.Equal(t, 652, StressRequestSize)
	require.Equal(t, 464, StressResponseSize)
	require.Equal(t, 258, StressRequestDocSize)
	require.Equal(t, 2*24*364, StressCalls)
}

func TestStressContentVaries(t *testing.T) {
	tests := []struct {
		i          int
		slot       string
		start, end string
	}{
		{0, `slot="00000"`, "2003-01-01T00:00:00Z", "2003-01-01T00:30:00Z"},
		{1, `slot="00001"`, "2003-01-01T00:30:00Z", "2003-01-01T01:00:00Z"},
		{48, `slot="00048"`, "2003-01-02T00:00:00Z", "2003-01-02T00:30:00Z"},
		{StressCalls - 1, `slot="17471"`, "2003-12-30T23:30:00Z", "2003-12-31T00:00:00Z"},
		{100000, `slot="00000"`, "2003-01-01T00:00:00Z", "2003-01-01T00:30:00Z"},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.i), func(t *testing.T) {
			req, resp := string(StressRequest(tt.i)), string(StressResponse(tt.i))
			require.Contains(t, req, tt.slot)
			require.Contains(t, req, "<start>"+tt.start+"</start><end>"+tt.end+"</end>")
			require.Contains(t, resp, tt.slot)
			require.Contains(t, resp, "<start>"+tt.start+"</start>")
		})
	}
	// No two calls of the scenario share a request or a response.
	seenReq, seenResp := map[string]int{}, map[string]int{}
	for i := range StressCalls {
		req, resp := string(StressRequest(i)), string(StressResponse(i))
		j, dup := seenReq[req]
		require.False(t, dup, "requests %d and %d are equal", i, j)
		j, dup = seenResp[resp]
		require.False(t, dup, "responses %d and %d are equal", i, j)
		seenReq[req], seenResp[resp] = i, i
	}
}

func TestStressRequestHeaders(t *testing.T) {
	h := StressRequestHeaders("localhost:8080")
	require.Equal(t, [][2]string{
		{"Content-Type", "text/xml; charset=utf-8"},
		{"Accept", "application/soap+xml, application/dime, multipart/related, text/*"},
		{"User-Agent", "Axis/1.0"},
		{"Host", "localhost:8080"},
		{"Cache-Control", "no-cache"},
		{"Pragma", "no-cache"},
		{"SOAPAction", `""`},
		{"Content-Length", "652"},
	}, h)
	h[0][1] = "changed"
	require.Equal(t, "text/xml; charset=utf-8", StressRequestHeaders("x")[0][1], "each call returns a fresh slice")
}
