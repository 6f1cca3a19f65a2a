package proxy

import (
	"bytes"
	"encoding/xml"
	"strconv"
	"strings"

	"github.com/soapgw/soapgw/internal/httpwire"
)

// soapVersion is the SOAP version a client speaks, judged from its Content-Type: SOAP 1.2
// uses application/soap+xml (RFC 3902), SOAP 1.1 text/xml.
type soapVersion int

const (
	soap11 soapVersion = iota
	soap12
)

func soapVersionOf(h httpwire.Header) soapVersion {
	ct := strings.ToLower(h.Get("Content-Type"))
	if strings.Contains(ct, "application/soap+xml") {
		return soap12
	}
	if strings.HasPrefix(ct, "multipart/related") && strings.Contains(ct, "application/soap+xml") {
		return soap12
	}
	return soap11
}

// Causes of gateway-made errors: stable names for metrics, logs and X-Soapgw-Error.
const (
	causeBadRequest      = "bad_request"
	causeBadTarget       = "bad_request_target"   // CONNECT, absolute-, authority- or asterisk-form
	causeMalformedBody   = "malformed_body"       // a request body that breaks its own framing
	causeTooManyConns    = "too_many_connections" // limits.max_client_connections reached
	causeTooLarge        = "request_too_large"
	causeResponseLarge   = "response_too_large"
	causeNoRoute         = "no_route"
	causeOriginDown      = "origin_unreachable"
	causeTunnelLost      = "tunnel_lost"
	causeTimeout         = "timeout"
	causeUpstreamDown    = "upstream_unreachable"
	causeUpstreamTimeout = "upstream_timeout"
	causeUpstreamBad     = "upstream_bad_response"
	causeUnknownUpstream = "unknown_upstream"
	causeOverloaded      = "overloaded"
	causeShuttingDown    = "shutting_down"
	causeInternal        = "internal"
)

// allCauses lists every cause, for metrics that start each series at 0.
var allCauses = []string{
	causeBadRequest, causeBadTarget, causeMalformedBody, causeTooManyConns, causeTooLarge, causeResponseLarge, causeNoRoute, causeOriginDown,
	causeTunnelLost, causeTimeout, causeUpstreamDown, causeUpstreamTimeout, causeUpstreamBad,
	causeUnknownUpstream, causeOverloaded, causeShuttingDown, causeInternal,
}

// faultResponse renders a gateway-made error as a complete HTTP response carrying a SOAP
// Fault in the client's SOAP version. Client-caused errors (4xx) use soap:Client /
// env:Sender; the others soap:Server / env:Receiver. The cause is repeated in the
// X-Soapgw-Error header so scripts need not parse XML.
func faultResponse(dst []byte, v soapVersion, protoMinor int, status int, cause, msg, exchangeID string, close bool) []byte {
	var body bytes.Buffer
	client := status >= 400 && status < 500
	if v == soap12 {
		code := "env:Receiver"
		if client {
			code = "env:Sender"
		}
		body.WriteString(`<?xml version="1.0" encoding="utf-8"?><env:Envelope xmlns:env="http://www.w3.org/2003/05/soap-envelope"><env:Body><env:Fault><env:Code><env:Value>`)
		body.WriteString(code)
		body.WriteString(`</env:Value></env:Code><env:Reason><env:Text xml:lang="en">`)
		xml.EscapeText(&body, []byte(msg))
		body.WriteString(`</env:Text></env:Reason><env:Detail>`)
		writeDetail(&body, cause, exchangeID)
		body.WriteString(`</env:Detail></env:Fault></env:Body></env:Envelope>`)
	} else {
		code := "soap:Server"
		if client {
			code = "soap:Client"
		}
		body.WriteString(`<?xml version="1.0" encoding="utf-8"?><soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><soap:Fault><faultcode>`)
		body.WriteString(code)
		body.WriteString(`</faultcode><faultstring>`)
		xml.EscapeText(&body, []byte(msg))
		body.WriteString(`</faultstring><detail>`)
		writeDetail(&body, cause, exchangeID)
		body.WriteString(`</detail></soap:Fault></soap:Body></soap:Envelope>`)
	}
	ct := "text/xml; charset=utf-8"
	if v == soap12 {
		ct = "application/soap+xml; charset=utf-8"
	}
	h := httpwire.Header{
		{Name: "Content-Type", Value: ct},
		{Name: "Content-Length", Value: strconv.Itoa(body.Len())},
		{Name: "X-Soapgw-Error", Value: cause},
	}
	if exchangeID != "" {
		h = append(h, httpwire.Field{Name: "X-Soapgw-Exchange", Value: exchangeID})
	}
	if close {
		h = append(h, httpwire.Field{Name: "Connection", Value: "close"})
	} else if protoMinor == 0 {
		h = append(h, httpwire.Field{Name: "Connection", Value: "keep-alive"})
	}
	dst = httpwire.AppendResponseHead(dst, protoMinor, status, reasonFor(status), h)
	return append(dst, body.Bytes()...)
}

func writeDetail(b *bytes.Buffer, cause, exchangeID string) {
	b.WriteString(`<gw:error xmlns:gw="urn:soapgw:error" cause="`)
	xml.EscapeText(b, []byte(cause))
	b.WriteString(`"`)
	if exchangeID != "" {
		b.WriteString(` exchange="`)
		xml.EscapeText(b, []byte(exchangeID))
		b.WriteString(`"`)
	}
	b.WriteString(`/>`)
}

func reasonFor(status int) string {
	switch status {
	case 400:
		return "Bad Request"
	case 404:
		return "Not Found"
	case 413:
		return "Content Too Large"
	case 431:
		return "Request Header Fields Too Large"
	case 500:
		return "Internal Server Error"
	case 501:
		return "Not Implemented"
	case 502:
		return "Bad Gateway"
	case 503:
		return "Service Unavailable"
	case 504:
		return "Gateway Timeout"
	case 505:
		return "HTTP Version Not Supported"
	}
	return "Error"
}
