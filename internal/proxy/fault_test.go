package proxy

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"io"
	"strconv"
	"testing"

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
		minor    int
		status   int
		close    bool
		id       string
		wantCode string
		wantNS   string
	}
	var cases []tc
	for _, status := range []int{400, 404, 413, 431, 500, 501, 502, 503, 504, 505} {
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
			for _, minor := range []int{0, 1} {
				for _, cl := range []bool{false, true} {
					cases = append(cases, tc{
						name: "v" + strconv.Itoa(int(v)) + "/" + strconv.Itoa(status) + "/1." + strconv.Itoa(minor) + "/close=" + strconv.FormatBool(cl),
						v:    v, minor: minor, status: status, close: cl, id: "8000000000abcdef",
						wantCode: code, wantNS: ns,
					})
				}
			}
		}
	}
	cases = append(cases, tc{name: "no exchange id", v: soap11, minor: 1, status: 400, wantCode: "soap:Client", wantNS: nsSOAP11})
	cases = append(cases, tc{name: "no exchange id 1.2", v: soap12, minor: 1, status: 502, wantCode: "env:Receiver", wantNS: nsSOAP12})

	msg := `soapgw: upstream "calc" <svc> & 'co' failed — Grüße 日本語 ✓` + "\n\ttab"
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			prefix := []byte("previous bytes")
			out := faultResponse(append([]byte(nil), prefix...), c.v, c.minor, c.status, causeUpstreamBad, msg, c.id, c.close)
			require.Equal(t, prefix, out[:len(prefix)], "faultResponse appends to dst")
			br := bufio.NewReader(bytes.NewReader(out[len(prefix):]))
			pf := parseFault(t, br, "POST")
			_, err := br.ReadByte()
			require.ErrorIs(t, err, io.EOF, "nothing after the announced body")

			r := pf.resp
			require.Equal(t, c.status, r.StatusCode)
			require.Equal(t, c.minor, r.ProtoMinor)
			require.Equal(t, reasonFor(c.status), r.Reason)
			require.Equal(t, strconv.Itoa(len(pf.body)), r.Header.Get("Content-Length"))
			require.Equal(t, int64(len(pf.body)), r.ContentLength)
			require.Equal(t, causeUpstreamBad, r.Header.Get("X-Soapgw-Error"))
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
			out := faultResponse(nil, v, 1, 502, causeInternal, msg, "1", false)
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
	out := faultResponse(nil, soap11, 1, 502, causeInternal, "x", "", false)
	br := bufio.NewReader(bytes.NewReader(out))
	resp, err := httpwire.ReadResponse(br, "HEAD", httpwire.Limits{})
	require.NoError(t, err)
	require.Equal(t, 502, resp.StatusCode)
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
