package proxy

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/httpwire"
)

const (
	nsSOAP11 = "http://schemas.xmlsoap.org/soap/envelope/"
	nsSOAP12 = "http://www.w3.org/2003/05/soap-envelope"
	nsGwErr  = "urn:soapgw:error"
)

type gwErrorDetail struct {
	XMLName  xml.Name `xml:"urn:soapgw:error error"`
	Cause    string   `xml:"cause,attr"`
	Exchange string   `xml:"exchange,attr"`
}

type soap11Envelope struct {
	XMLName xml.Name `xml:"http://schemas.xmlsoap.org/soap/envelope/ Envelope"`
	Body    struct {
		Fault *struct {
			Code   string `xml:"faultcode"`
			String string `xml:"faultstring"`
			Detail struct {
				Error gwErrorDetail `xml:"urn:soapgw:error error"`
			} `xml:"detail"`
		} `xml:"http://schemas.xmlsoap.org/soap/envelope/ Fault"`
	} `xml:"http://schemas.xmlsoap.org/soap/envelope/ Body"`
}

type soap12Envelope struct {
	XMLName xml.Name `xml:"http://www.w3.org/2003/05/soap-envelope Envelope"`
	Body    struct {
		Fault *struct {
			Code struct {
				Value string `xml:"http://www.w3.org/2003/05/soap-envelope Value"`
			} `xml:"http://www.w3.org/2003/05/soap-envelope Code"`
			Reason struct {
				Text struct {
					Lang  string `xml:"http://www.w3.org/XML/1998/namespace lang,attr"`
					Value string `xml:",chardata"`
				} `xml:"http://www.w3.org/2003/05/soap-envelope Text"`
			} `xml:"http://www.w3.org/2003/05/soap-envelope Reason"`
			Detail struct {
				Error gwErrorDetail `xml:"urn:soapgw:error error"`
			} `xml:"http://www.w3.org/2003/05/soap-envelope Detail"`
		} `xml:"http://www.w3.org/2003/05/soap-envelope Fault"`
	} `xml:"http://www.w3.org/2003/05/soap-envelope Body"`
}

// parsedFault is what a client can learn from a gateway fault.
type parsedFault struct {
	resp     *httpwire.Response
	body     []byte
	code     string // faultcode / Code/Value, as written (prefix:local)
	codeNS   string // namespace the code's prefix is bound to
	text     string // faultstring / Reason/Text
	cause    string // detail attribute
	exchange string
}

// parseFault reads one HTTP response carrying a SOAP Fault from b (or r) and decodes it.
func parseFault(t testing.TB, br *bufio.Reader, method string) parsedFault {
	t.Helper()
	resp, err := httpwire.ReadResponse(br, method, httpwire.Limits{})
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	pf := parsedFault{resp: resp, body: body}
	ct := resp.Header.Get("Content-Type")
	switch soapVersionOf(resp.Header) {
	case soap12:
		require.Equal(t, "application/soap+xml; charset=utf-8", ct)
		var env soap12Envelope
		require.NoError(t, xml.Unmarshal(body, &env), "body: %s", body)
		require.NotNil(t, env.Body.Fault, "body: %s", body)
		f := env.Body.Fault
		pf.code, pf.text = f.Code.Value, f.Reason.Text.Value
		require.Equal(t, "en", f.Reason.Text.Lang)
		pf.cause, pf.exchange = f.Detail.Error.Cause, f.Detail.Error.Exchange
	default:
		require.Equal(t, "text/xml; charset=utf-8", ct)
		var env soap11Envelope
		require.NoError(t, xml.Unmarshal(body, &env), "body: %s", body)
		require.NotNil(t, env.Body.Fault, "body: %s", body)
		f := env.Body.Fault
		pf.code, pf.text = f.Code, f.String
		pf.cause, pf.exchange = f.Detail.Error.Cause, f.Detail.Error.Exchange
	}
	pf.codeNS = qnameNamespace(t, body, pf.code)
	return pf
}

// qnameNamespace resolves the prefix of a QName value against the declarations in the
// document (the fault code is a QName in element content, so encoding/xml does not).
func qnameNamespace(t testing.TB, doc []byte, qname string) string {
	t.Helper()
	prefix, _, ok := bytes.Cut([]byte(qname), []byte(":"))
	require.True(t, ok, "fault code %q is not a QName", qname)
	d := xml.NewDecoder(bytes.NewReader(doc))
	for {
		tok, err := d.RawToken()
		if err == io.EOF {
			return ""
		}
		require.NoError(t, err)
		if se, ok := tok.(xml.StartElement); ok {
			for _, a := range se.Attr {
				if a.Name.Space == "xmlns" && a.Name.Local == string(prefix) {
					return a.Value
				}
			}
		}
	}
}

func TestFaultResponse(t *testing.T) {
	type tc struct {
		name     string
		v        soapVersion
		mode     FaultStatus
		minor    int
		status   int // HTTP-semantic
		close    bool
		id       string
		wantLine int // status line
		wantCode string
		wantNS   string
	}
	var cases []tc
	for _, status := range []int{400, 404, 405, 413, 431, 500, 501, 502, 503, 504, 505} {
		client := status < 500
		for _, v := range []soapVersion{soap11, soap12} {
			code, ns := "soap:Server", nsSOAP11
			switch {
			case v == soap11 && client:
				code = "soap:Client"
			case v == soap12 && client:
				code, ns = "env:Sender", nsSOAP12
			case v == soap12:
				code, ns = "env:Receiver", nsSOAP12
			}
			for _, mode := range []FaultStatus{FaultStatusSOAP, FaultStatusHTTP} {
				line := status
				if mode == FaultStatusSOAP {
					line = 500
					if v == soap12 && client {
						line = 400
					}
				}
				for _, minor := range []int{0, 1} {
					for _, cl := range []bool{false, true} {
						cases = append(cases, tc{
							name: "v" + strconv.Itoa(int(v)) + "/" + mode.String() + "/" + strconv.Itoa(status) + "/1." + strconv.Itoa(minor) + "/close=" + strconv.FormatBool(cl),
							v:    v, mode: mode, minor: minor, status: status, close: cl, id: "8000000000abcdef",
							wantLine: line, wantCode: code, wantNS: ns,
						})
					}
				}
			}
		}
	}
	cases = append(cases, tc{name: "no exchange id", v: soap11, minor: 1, status: 400, wantLine: 500, wantCode: "soap:Client", wantNS: nsSOAP11})
	cases = append(cases, tc{name: "no exchange id 1.2", v: soap12, minor: 1, status: 502, wantLine: 500, wantCode: "env:Receiver", wantNS: nsSOAP12})

	msg := `soapgw: upstream "calc" <svc> & 'co' failed — Grüße 日本語 ✓` + "\n\ttab"
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			prefix := []byte("previous bytes")
			ge := &gatewayError{Status: c.status, Cause: causeUpstreamBad, Message: msg}
			out := faultResponse(append([]byte(nil), prefix...), ge, c.mode, c.v, c.minor, c.id, c.close)
			require.Equal(t, prefix, out[:len(prefix)], "faultResponse appends to dst")
			br := bufio.NewReader(bytes.NewReader(out[len(prefix):]))
			pf := parseFault(t, br, "POST")
			_, err := br.ReadByte()
			require.ErrorIs(t, err, io.EOF, "nothing after the announced body")

			r := pf.resp
			require.Equal(t, c.wantLine, r.StatusCode)
			require.Equal(t, c.minor, r.ProtoMinor)
			require.Equal(t, reasonFor(c.wantLine), r.Reason)
			require.Equal(t, strconv.Itoa(len(pf.body)), r.Header.Get("Content-Length"))
			require.Equal(t, int64(len(pf.body)), r.ContentLength)
			require.Equal(t, causeUpstreamBad, r.Header.Get("X-Soapgw-Error"))
			require.Equal(t, []string{strconv.Itoa(c.status)}, r.Header.Values("X-Soapgw-Status"))
			if c.id != "" {
				require.Equal(t, c.id, r.Header.Get("X-Soapgw-Exchange"))
			} else {
				require.False(t, r.Header.Has("X-Soapgw-Exchange"))
			}
			switch {
			case c.close:
				require.Equal(t, []string{"close"}, r.Header.Values("Connection"))
			case c.minor == 0:
				require.Equal(t, []string{"keep-alive"}, r.Header.Values("Connection"))
			default:
				require.False(t, r.Header.Has("Connection"))
			}
			require.Equal(t, c.close, r.Close, "persistence as the client will judge it")

			require.Equal(t, c.wantCode, pf.code)
			require.Equal(t, c.wantNS, pf.codeNS)
			require.Equal(t, msg, pf.text)
			require.Equal(t, causeUpstreamBad, pf.cause)
			require.Equal(t, c.id, pf.exchange)
		})
	}
}

// causeStatuses are the HTTP-semantic statuses each cause is reported with
// (docs/operations.md, the causes table); the edge and origin tests check that the code
// uses them.
var causeStatuses = map[string][]int{
	causeBadRequest:      {400, 431, 501, 505},
	causeBadTarget:       {405, 400},
	causeMalformedBody:   {400},
	causeTooManyConns:    {503},
	causeTooLarge:        {413},
	causeResponseLarge:   {502},
	causeNoRoute:         {404},
	causeOriginDown:      {503},
	causeTunnelLost:      {502},
	causeOutcomeUnknown:  {502},
	causeTimeout:         {504},
	causeUpstreamDown:    {502},
	causeUpstreamTimeout: {504},
	causeUpstreamBad:     {502},
	causeUnknownUpstream: {502},
	causeOverloaded:      {503},
	causeShuttingDown:    {503},
	causeInternal:        {502},
	causeSpoolFull:       {503},
	causeSpoolError:      {503},
}

// TestFaultStatusModes: for every cause with each of its statuses, in each SOAP version
// and FaultStatus mode, what a client and a script see: the status line, the fault code,
// X-Soapgw-Error and X-Soapgw-Status. In soap mode SOAP 1.1 Faults are all 500 (SOAP 1.1
// §6.2, WS-I BP R1126) and SOAP 1.2 ones 400 for env:Sender, 500 for env:Receiver; in
// http mode the status line is the HTTP-semantic status.
func TestFaultStatusModes(t *testing.T) {
	var causes []string
	for c := range causeStatuses {
		causes = append(causes, c)
	}
	require.ElementsMatch(t, allCauses, causes, "every cause has its statuses listed")
	type want struct {
		line int
		code string
	}
	// By HTTP-semantic status class: client (4xx) or not.
	expect := map[bool]map[soapVersion]map[FaultStatus]func(status int) want{
		true: { // the client's fault
			soap11: {
				FaultStatusSOAP: func(int) want { return want{500, "soap:Client"} },
				FaultStatusHTTP: func(s int) want { return want{s, "soap:Client"} },
			},
			soap12: {
				FaultStatusSOAP: func(int) want { return want{400, "env:Sender"} },
				FaultStatusHTTP: func(s int) want { return want{s, "env:Sender"} },
			},
		},
		false: { // the gateway's or the server side's
			soap11: {
				FaultStatusSOAP: func(int) want { return want{500, "soap:Server"} },
				FaultStatusHTTP: func(s int) want { return want{s, "soap:Server"} },
			},
			soap12: {
				FaultStatusSOAP: func(int) want { return want{500, "env:Receiver"} },
				FaultStatusHTTP: func(s int) want { return want{s, "env:Receiver"} },
			},
		},
	}
	for _, cause := range allCauses {
		for _, status := range causeStatuses[cause] {
			for _, v := range []soapVersion{soap11, soap12} {
				for _, mode := range []FaultStatus{FaultStatusSOAP, FaultStatusHTTP} {
					name := cause + "/" + strconv.Itoa(status) + "/soap1" + strconv.Itoa(int(v)+1) + "/" + mode.String()
					t.Run(name, func(t *testing.T) {
						w := expect[status < 500][v][mode](status)
						ge := &gatewayError{Status: status, Cause: cause, Message: "soapgw: " + cause}
						pf := parseFault(t, bufio.NewReader(bytes.NewReader(faultResponse(nil, ge, mode, v, 1, "7", false))), "POST")
						require.Equal(t, w.line, pf.resp.StatusCode)
						require.Equal(t, reasonFor(w.line), pf.resp.Reason)
						require.Equal(t, w.code, pf.code)
						require.Equal(t, cause, pf.resp.Header.Get("X-Soapgw-Error"))
						require.Equal(t, strconv.Itoa(status), pf.resp.Header.Get("X-Soapgw-Status"))
						require.Equal(t, cause, pf.cause)
						require.Equal(t, "soapgw: "+cause, pf.text)
						// The metric's fault code is the one in the Fault.
						_, local, _ := strings.Cut(w.code, ":")
						require.Equal(t, local, gatewayFaultCode(v, status))
					})
				}
			}
		}
	}
}

func TestFaultStatusString(t *testing.T) {
	require.Equal(t, "soap", FaultStatusSOAP.String())
	require.Equal(t, "http", FaultStatusHTTP.String())
	require.Equal(t, FaultStatusSOAP, Limits{}.FaultStatus, "the zero value is the default")
}

func TestFaultResponseKnownReasons(t *testing.T) {
	for status, reason := range map[int]string{
		400: "Bad Request", 404: "Not Found", 413: "Content Too Large",
		431: "Request Header Fields Too Large", 500: "Internal Server Error", 501: "Not Implemented",
		502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout",
	} {
		require.Equal(t, reason, reasonFor(status))
	}
}

// Whatever the message holds (control characters, invalid UTF-8, markup), the fault is
// well-formed XML and the text survives as far as XML 1.0 can carry it.
func TestFaultResponseHostileMessage(t *testing.T) {
	for _, msg := range []string{
		"",
		"]]><!-- --><![CDATA[x]]>",
		"</faultstring><faultcode>soap:Client</faultcode>",
		"</env:Text></env:Reason>",
		"nul\x00 bell\x07 esc\x1b",
		"bad utf-8 \xff\xfe end",
		"cr\r\nlf",
		`&amp; &lt; &#x41; &bogus;`,
	} {
		for _, v := range []soapVersion{soap11, soap12} {
			out := faultResponse(nil, &gatewayError{Status: 502, Cause: causeInternal, Message: msg}, FaultStatusSOAP, v, 1, "1", false)
			pf := parseFault(t, bufio.NewReader(bytes.NewReader(out)), "POST")
			require.NotEmpty(t, pf.code)
			require.Equal(t, causeInternal, pf.cause)
			if isXMLSafe(msg) {
				require.Equal(t, msg, pf.text)
			}
		}
	}
}

func isXMLSafe(s string) bool {
	for _, r := range s {
		if r == 0xFFFD || (r < 0x20 && r != '\t' && r != '\n' && r != '\r') {
			return false
		}
	}
	return true
}

// A fault in answer to HEAD still parses (the client gets the head; no body is read).
func TestFaultResponseHead(t *testing.T) {
	for _, mode := range []FaultStatus{FaultStatusSOAP, FaultStatusHTTP} {
		out := faultResponse(nil, &gatewayError{Status: 502, Cause: causeInternal, Message: "x"}, mode, soap11, 1, "", false)
		br := bufio.NewReader(bytes.NewReader(out))
		resp, err := httpwire.ReadResponse(br, "HEAD", httpwire.Limits{})
		require.NoError(t, err)
		require.Equal(t, map[FaultStatus]int{FaultStatusSOAP: 500, FaultStatusHTTP: 502}[mode], resp.StatusCode)
		require.Equal(t, "502", resp.Header.Get("X-Soapgw-Status"))
	}
}

func TestSoapVersionOf(t *testing.T) {
	cases := []struct {
		ct   string
		want soapVersion
	}{
		{"", soap11},
		{"text/xml", soap11},
		{"text/xml; charset=utf-8", soap11},
		{`text/xml; charset="UTF-8"`, soap11},
		{"application/soap+xml", soap12},
		{`application/soap+xml; charset=utf-8; action="urn:Add"`, soap12},
		{"APPLICATION/SOAP+XML; charset=utf-8", soap12},
		{"Application/Soap+Xml", soap12},
		{"application/xml", soap11},
		{"text/plain", soap11},
		// MTOM/XOP: the SOAP version is in type / start-info.
		{`multipart/related; type="application/xop+xml"; start-info="application/soap+xml"; boundary="b"`, soap12},
		{`Multipart/Related; type="application/soap+xml"; boundary=x`, soap12},
		{`multipart/related; type="application/xop+xml"; start-info="text/xml"; boundary="b"`, soap11},
		{`multipart/related; type="text/xml"; boundary=b`, soap11},
	}
	for _, c := range cases {
		h := httpwire.Header{{Name: "Host", Value: "x"}}
		if c.ct != "" {
			h = append(h, httpwire.Field{Name: "Content-Type", Value: c.ct})
		}
		require.Equal(t, c.want, soapVersionOf(h), "Content-Type %q", c.ct)
	}
	// The field name is matched case-insensitively.
	require.Equal(t, soap12, soapVersionOf(httpwire.Header{{Name: "content-type", Value: "application/soap+xml"}}))
	require.Equal(t, soap12, soapVersionOf(httpwire.Header{{Name: "CONTENT-TYPE", Value: "application/soap+xml"}}))
	require.Equal(t, soap11, soapVersionOf(nil))
}

// requireGatewayStatus checks a gateway Fault as the edge sends it by default
// (FaultStatusSOAP): X-Soapgw-Status is the HTTP-semantic status, and the status line the
// SOAP binding's, 400 for a SOAP 1.2 env:Sender Fault, 500 otherwise.
func requireGatewayStatus(t testing.TB, f parsedFault, status int) {
	t.Helper()
	require.Equal(t, strconv.Itoa(status), f.resp.Header.Get("X-Soapgw-Status"), "HTTP-semantic status")
	line := 500
	if soapVersionOf(f.resp.Header) == soap12 && isClientStatus(status) {
		line = 400
	}
	require.Equal(t, line, f.resp.StatusCode, "status line of a %d Fault (fault code %s)", status, f.code)
}

// TestEdgeFaultStatus: through a real edge and origin, every path that answers with a
// gateway Fault (the edge's own refusals, a refused target, a malformed request, and an
// error reported by the origin) follows limits' FaultStatus, which a Reconfigure switches
// for the next request; X-Soapgw-Status, the fault code and the metrics stay the same in
// both modes.
func TestEdgeFaultStatus(t *testing.T) {
	up := newUpstream(t, okResponse("<ok/>"))
	m := NewMetrics(nil)
	routes := []Route{{PathPrefix: "/svc", Peer: "p", Upstream: "up"}, {PathPrefix: "/ghost", Peer: "p", Upstream: "ghost"}}
	env := newEnv(t, envConfig{Upstreams: []Upstream{{Name: "up", Address: up.addr()}}, Routes: routes, Metrics: m})
	req12 := func(target string) string {
		return "POST " + target + " HTTP/1.1\r\nHost: svc.example\r\nContent-Type: application/soap+xml; charset=utf-8; action=\"urn:Add\"\r\nContent-Length: 4\r\n\r\n<x/>"
	}
	cases := []struct {
		name    string
		raw     string
		status  int // HTTP-semantic
		cause   string
		v12     bool
		persist bool // the connection stays open after the Fault
	}{
		{"origin error 1.1", soapRequest(1, "/ghost", "", "<x/>"), 502, causeUnknownUpstream, false, true},
		{"origin error 1.2", req12("/ghost"), 502, causeUnknownUpstream, true, true},
		{"no route 1.1", soapRequest(1, "/nowhere", "", "<x/>"), 404, causeNoRoute, false, false},
		{"no route 1.2", req12("/nowhere"), 404, causeNoRoute, true, false},
		{"CONNECT", "CONNECT " + up.addr() + " HTTP/1.1\r\nHost: " + up.addr() + "\r\n\r\n", 405, causeBadTarget, false, false},
		{"malformed", "POST /svc HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx", 400, causeBadRequest, false, false},
		{"HTTP/2.0", "POST /svc HTTP/2.0\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 505, causeBadRequest, false, false},
	}
	for _, mode := range []FaultStatus{FaultStatusSOAP, FaultStatusHTTP} {
		if mode == FaultStatusHTTP {
			require.NoError(t, env.edge.Reconfigure(routes, Limits{ExchangeTimeout: testDeadline, FaultStatus: FaultStatusHTTP}))
		}
		for _, c := range cases {
			t.Run(mode.String()+"/"+c.name, func(t *testing.T) {
				cl := env.dial()
				cl.send(c.raw)
				f := cl.readFault()
				want := c.status
				if mode == FaultStatusSOAP {
					want = 500
					if c.v12 && isClientStatus(c.status) {
						want = 400
					}
				}
				require.Equal(t, want, f.resp.StatusCode)
				require.Equal(t, strconv.Itoa(c.status), f.resp.Header.Get("X-Soapgw-Status"))
				require.Equal(t, c.cause, f.resp.Header.Get("X-Soapgw-Error"))
				require.Equal(t, c.cause, f.cause)
				code := gatewayFaultCode(map[bool]soapVersion{false: soap11, true: soap12}[c.v12], c.status)
				require.True(t, strings.HasSuffix(f.code, ":"+code), "fault code %s, want %s", f.code, code)
				if c.persist {
					cl.send(soapRequest(1, "/svc", "", "<x/>"))
					resp, _ := cl.read("POST")
					require.Equal(t, 200, resp.StatusCode, "the server's answer is untouched")
					require.False(t, resp.Header.Has("X-Soapgw-Status"))
				} else {
					cl.requireClosed()
				}
			})
		}
	}
	// Counted by HTTP-semantic status and fault code, once per mode: the series do not
	// depend on the status line. The malformed requests are counted in neither (they are
	// no exchange); CONNECT is a SOAP 1.1 Client fault of upstream "none".
	for _, c := range []struct {
		upstream, faultCode string
		n                   float64
	}{
		{"ghost", "Server", 2}, {"ghost", "Receiver", 2}, {"none", "Client", 4}, {"none", "Sender", 2},
	} {
		require.Equal(t, c.n, testutil.ToFloat64(m.faults.WithLabelValues("edge", c.upstream, "gateway", c.faultCode)), "%+v", c)
	}
	require.Equal(t, 4, testutil.CollectAndCount(m.faults))
	require.Equal(t, 4.0, testutil.ToFloat64(m.exchanges.WithLabelValues("edge", "ghost", "Add", "502", "gateway_error")))
	require.Equal(t, 4.0, testutil.ToFloat64(m.exchanges.WithLabelValues("edge", "none", "Add", "404", "gateway_error")))
	require.Equal(t, 2.0, testutil.ToFloat64(m.exchanges.WithLabelValues("edge", "none", "unknown", "405", "gateway_error")))
	// The origin may record its side after the client has the answer.
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(m.exchanges.WithLabelValues("origin", "ghost", "Add", "502", "gateway_error")) == 4 &&
			testutil.ToFloat64(m.exchanges.WithLabelValues("origin", "up", "Add", "200", "ok")) == 4
	}, testDeadline, time.Millisecond)
	require.Equal(t, 6, testutil.CollectAndCount(m.exchanges, "soapgw_exchanges_total"),
		"those three, the ok exchanges to up and the origin's two: none carries the status line (500 or 400)")
}
