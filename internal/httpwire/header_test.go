package httpwire_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/httpwire"
)

func sampleHeader() httpwire.Header {
	return httpwire.Header{
		{"Host", "svc.example"},
		{"SOAPAction", `"urn:Echo"`},
		{"Connection", "keep-alive, X-Hop"},
		{"x-hop", "1"},
		{"Accept", "text/xml"},
		{"accept", "application/soap+xml"},
		{"Keep-Alive", "timeout=5"},
		{"Content-Length", "12"},
	}
}

func TestHeaderGetValuesHas(t *testing.T) {
	h := sampleHeader()
	for _, tc := range []struct {
		name   string
		get    string
		values []string
	}{
		{"soapaction", `"urn:Echo"`, []string{`"urn:Echo"`}},
		{"SOAPACTION", `"urn:Echo"`, []string{`"urn:Echo"`}},
		{"Accept", "text/xml", []string{"text/xml", "application/soap+xml"}},
		{"Missing", "", nil},
		{"", "", nil},
		{"Hos", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.get, h.Get(tc.name))
			require.Equal(t, tc.values, h.Values(tc.name))
			require.Equal(t, tc.values != nil, h.Has(tc.name))
		})
	}
	require.Empty(t, httpwire.Header(nil).Get("x"))
}

func TestHeaderDel(t *testing.T) {
	h := sampleHeader()
	got := h.Del("ACCEPT")
	require.Equal(t, httpwire.Header{
		{"Host", "svc.example"},
		{"SOAPAction", `"urn:Echo"`},
		{"Connection", "keep-alive, X-Hop"},
		{"x-hop", "1"},
		{"Keep-Alive", "timeout=5"},
		{"Content-Length", "12"},
	}, got)
	require.Equal(t, got, got.Del("absent"))
	require.Empty(t, httpwire.Header(nil).Del("x"))
}

func TestHeaderClone(t *testing.T) {
	require.Nil(t, httpwire.Header(nil).Clone())
	h := sampleHeader()
	c := h.Clone()
	require.Equal(t, h, c)
	c[0].Value = "changed"
	require.Equal(t, "svc.example", h[0].Value)
}

func TestHeaderHasToken(t *testing.T) {
	h := httpwire.Header{
		{"Connection", " Keep-Alive ,,  TE"},
		{"connection", "Upgrade"},
		{"Expect", "100-Continue"},
		{"X", "closed, close-ish"},
	}
	for _, tc := range []struct {
		name, token string
		want        bool
	}{
		{"Connection", "keep-alive", true},
		{"CONNECTION", "te", true},
		{"Connection", "upgrade", true},
		{"Connection", "close", false},
		{"Connection", "", false},
		{"Expect", "100-continue", true},
		{"X", "close", false},
		{"Missing", "x", false},
	} {
		require.Equal(t, tc.want, h.HasToken(tc.name, tc.token), "%s/%s", tc.name, tc.token)
	}
}

func TestIsHopByHop(t *testing.T) {
	for name, want := range map[string]bool{
		"Connection": true, "connection": true, "Keep-Alive": true, "Proxy-Connection": true,
		"TE": true, "te": true, "Transfer-Encoding": true, "Upgrade": true, "Trailer": true,
		"Proxy-Authenticate": false, "Proxy-Authorization": false, "Content-Length": false,
		"SOAPAction": false, "Host": false, "Trailers": false, "T": false, "": false,
	} {
		require.Equal(t, want, httpwire.IsHopByHop(name), name)
	}
}

func TestEndToEnd(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   httpwire.Header
		want httpwire.Header
	}{
		{
			name: "hop-by-hop and connection options dropped, order kept",
			in:   sampleHeader(),
			want: httpwire.Header{
				{"Host", "svc.example"},
				{"SOAPAction", `"urn:Echo"`},
				{"Accept", "text/xml"},
				{"accept", "application/soap+xml"},
				{"Content-Length", "12"},
			},
		},
		{
			name: "Connection cannot remove Content-Length or Host",
			in: httpwire.Header{
				{"Host", "h"}, {"Content-Length", "3"}, {"X-Auth", "secret"},
				{"Connection", "close, content-length, HOST, x-auth"},
			},
			want: httpwire.Header{{"Host", "h"}, {"Content-Length", "3"}},
		},
		{
			name: "all hop-by-hop names",
			in: httpwire.Header{
				{"TE", "trailers"}, {"Transfer-Encoding", "chunked"}, {"Upgrade", "h2c"},
				{"Trailer", "X-Sum"}, {"Proxy-Connection", "keep-alive"}, {"Keep-Alive", "1"},
				{"Proxy-Authorization", "Basic eA=="},
			},
			want: httpwire.Header{{"Proxy-Authorization", "Basic eA=="}},
		},
		{name: "empty", in: nil, want: httpwire.Header{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := tc.in.Clone()
			require.Equal(t, tc.want, httpwire.EndToEnd(tc.in))
			require.Equal(t, orig, tc.in, "input must not be modified")
			buf := make(httpwire.Header, 0, 16)
			require.Equal(t, tc.want, httpwire.AppendEndToEnd(buf, tc.in))
		})
	}
}
