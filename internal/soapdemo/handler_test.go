package soapdemo

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func newStressServer(t *testing.T) (addr string) {
	t.Helper()
	srv := httptest.NewServer(NewStressHandler())
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

func callCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestHandlerRoundTrip(t *testing.T) {
	addr := newStressServer(t)
	for _, i := range []int{0, 1, 1000, StressCalls - 1} {
		status, body, err := CallHTTP10(callCtx(t), addr, StressPath, StressRequest(i), StressRequestHeaders(addr))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status, "%s", body)
		require.Equal(t, string(StressResponse(i)), string(body), "call %d", i)
	}
}

// TestHandlerWireSize pins the HTTP/1.0 response size documented on
// StressResponse: status line and net/http's three headers, then the body.
func TestHandlerWireSize(t *testing.T) {
	addr := newStressServer(t)
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(4*time.Second)))
	req, err := appendHTTP10Request(nil, StressPath, StressRequest(7), StressRequestHeaders("localhost:8080"))
	require.NoError(t, err)
	require.Len(t, req, 931)
	_, err = c.Write(req)
	require.NoError(t, err)
	resp, err := io.ReadAll(c) // HTTP/1.0: the server closes after replying
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(resp, []byte("HTTP/1.0 200 OK\r\n")), "%s", resp)
	require.True(t, bytes.HasSuffix(resp, StressResponse(7)))
	require.Len(t, resp, 580, "%s", resp)
}

type soapFault struct {
	XMLName xml.Name `xml:"http://schemas.xmlsoap.org/soap/envelope/ Envelope"`
	Fault   struct {
		Code   string `xml:"faultcode"`
		String string `xml:"faultstring"`
	} `xml:"http://schemas.xmlsoap.org/soap/envelope/ Body>Fault"`
}

func TestHandlerFaults(t *testing.T) {
	good := string(StressRequest(5))
	tests := []struct {
		name string
		body string
		want string // in faultstring
	}{
		{"not XML", "hello", "malformed request"},
		{"empty", "", "malformed request"},
		{"truncated", good[:300], "malformed request"},
		{"SOAP 1.2 envelope", strings.ReplaceAll(good, "http://schemas.xmlsoap.org/soap/envelope/",
			"http://www.w3.org/2003/05/soap-envelope"), "malformed request"},
		{"wrong namespace", strings.Replace(good, `xmlns:ns1="urn:Diary"`, `xmlns:ns1="urn:Other"`, 1), "no {urn:Diary}addEntry"},
		{"no entry", strings.Replace(strings.Replace(good, "<entry ", "<other ", 1), "</entry>", "</other>", 1), "no {urn:Diary}addEntry"},
		{"signed slot", strings.Replace(good, `slot="00005"`, `slot="+0005"`, 1), `slot "+0005" is not 5 digits`},
		{"short slot", strings.Replace(good, `slot="00005"`, `slot="5"`, 1), `slot "5" is not 5 digits`},
		{"slot of another entry", strings.Replace(good, `slot="00005"`, `slot="00006"`, 1), "entry does not match slot 00006"},
		{"corrupted subject", strings.Replace(good, "<subject>", "<subject>x", 1), "entry does not match slot 00005"},
		{"too large", good + strings.Repeat(" ", maxRequestBody), "reading request"},
	}
	addr := newStressServer(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body, err := CallHTTP10(callCtx(t), addr, StressPath, []byte(tt.body), StressRequestHeaders(addr)[:7])
			require.NoError(t, err)
			require.Equal(t, http.StatusInternalServerError, status)
			var f soapFault
			require.NoError(t, xml.Unmarshal(body, &f), "%s", body)
			require.Equal(t, "soapenv:Client", f.Fault.Code)
			require.Contains(t, f.Fault.String, tt.want)
		})
	}
}

func TestHandlerGET(t *testing.T) {
	srv := httptest.NewServer(NewStressHandler())
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	tests := []struct {
		name   string
		query  string
		wsdl   bool
		substr string
	}{
		{"wsdl", "?wsdl", true, `location="http://` + addr + StressPath + `"`},
		{"WSDL upper case", "?WSDL", true, `<wsdl:operation name="addEntry"`},
		{"no query", "", false, "this is an AXIS service"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body, err := CallHTTP10(callCtx(t), addr, StressPath+tt.query, nil, [][2]string{{"Host", addr}})
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, status)
			require.Contains(t, string(body), tt.substr)
			if tt.wsdl {
				var defs struct {
					XMLName         xml.Name `xml:"http://schemas.xmlsoap.org/wsdl/ definitions"`
					TargetNamespace string   `xml:"targetNamespace,attr"`
				}
				require.NoError(t, xml.Unmarshal(body, &defs), "%s", body)
				require.Equal(t, StressNamespace, defs.TargetNamespace)
			}
		})
	}

	req, err := http.NewRequestWithContext(callCtx(t), http.MethodPut, srv.URL+StressPath, nil)
	require.NoError(t, err)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	require.Equal(t, "GET, HEAD, POST", resp.Header.Get("Allow"))
}
