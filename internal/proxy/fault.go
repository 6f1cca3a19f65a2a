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
	causeTunnelLost      = "tunnel_lost"     // the request did not reach the server whole: not executed
	causeOutcomeUnknown  = "outcome_unknown" // the server may have executed it; its answer could not be had
	causeTimeout         = "timeout"
	causeUpstreamDown    = "upstream_unreachable"
	causeUpstreamTimeout = "upstream_timeout"
	causeUpstreamBad     = "upstream_bad_response"
	causeUnknownUpstream = "unknown_upstream"
	causeOverloaded      = "overloaded"
	causeShuttingDown    = "shutting_down"
	causeInternal        = "internal"
	causeSpoolFull       = "spool_full"  // one-way: the edge's spool is at its limits
	causeSpoolError      = "spool_error" // one-way: the spool could not be written
)

// allCauses lists every cause, for metrics that start each series at 0.
var allCauses = []string{
	causeBadRequest, causeBadTarget, causeMalformedBody, causeTooManyConns, causeTooLarge, causeResponseLarge, causeNoRoute, causeOriginDown,
	causeTunnelLost, causeOutcomeUnknown, causeTimeout, causeUpstreamDown, causeUpstreamTimeout, causeUpstreamBad,
	causeUnknownUpstream, causeOverloaded, causeShuttingDown, causeInternal, causeSpoolFull, causeSpoolError,
}

// FaultStatus chooses the HTTP status line of the SOAP Faults the gateway makes itself
// (Limits.FaultStatus). It changes nothing else: the fault code, the faultstring or
// Reason, the <gw:error cause=...> detail and the X-Soapgw-Error, X-Soapgw-Status and
// X-Soapgw-Exchange fields are the same in both modes.
//
// Which responses it applies to: every response the edge makes itself, because every one
// is a SOAP Fault in the client's SOAP version. That includes refusals of requests that
// may not be SOAP calls at all (CONNECT, malformed HTTP, an unsupported HTTP version, a
// connection over max_client_connections): the edge cannot tell a SOAP stack's bad
// request from another client's, and a SOAP stack whose request is refused (a 431 for an
// oversized WS-Security header) is exactly the client that must be able to read why. So
// there is no exception; the HTTP-semantic status (405 for CONNECT, 431, 505, ...) is in
// X-Soapgw-Status. What it never touches: "100 Continue" (not a fault), every response of
// the real server (relayed with its own status, byte for byte, a server's Fault
// included), and an exchange whose response had started when it failed (the client
// connection is aborted; there is no Fault to send).
type FaultStatus uint8

const (
	// FaultStatusSOAP (the default) sends gateway Faults with the status the SOAP HTTP
	// bindings give a Fault, the one status every SOAP stack reads a Fault body from:
	//
	//   - SOAP 1.1: 500 for every Fault, soap:Client ones included (SOAP 1.1 §6.2: "the
	//     SOAP HTTP server MUST issue an HTTP 500"; WS-I Basic Profile R1126). Stacks such
	//     as suds read a Fault on 500 only and report a 400 as a bare HTTP error.
	//   - SOAP 1.2: 400 for env:Sender (the client's fault), 500 for env:Receiver (the
	//     fault-to-status table of the HTTP binding, SOAP 1.2 Part 2 §7).
	//
	// The HTTP-semantic status is in the X-Soapgw-Status field.
	FaultStatusSOAP FaultStatus = iota
	// FaultStatusHTTP sends gateway Faults with the HTTP-semantic status: 502, 503, 504
	// for the gateway's and the server side's failures, 413, 404, 400, 405, 431, 501,
	// 505 for refused requests (see the causes in docs/operations.md), for load
	// balancers and scripts that act on the status.
	FaultStatusHTTP
)

// String is the configuration name of the mode: "soap" or "http".
func (m FaultStatus) String() string {
	if m == FaultStatusHTTP {
		return "http"
	}
	return "soap"
}

// statusLine is the status a Fault of HTTP-semantic status status is sent with to a
// client of SOAP version v.
func (m FaultStatus) statusLine(v soapVersion, status int) int {
	switch {
	case m == FaultStatusHTTP:
		return status
	case v == soap12 && isClientStatus(status):
		return 400
	}
	return 500
}

// isClientStatus reports whether a gateway error of HTTP-semantic status status is the
// client's fault (soap:Client, env:Sender): a 4xx. Always judged on the HTTP-semantic
// status, never on the status sent, which in FaultStatusSOAP says little.
func isClientStatus(status int) bool { return status >= 400 && status < 500 }

// faultResponse renders a gateway-made error as a complete HTTP response carrying a SOAP
// Fault in the client's SOAP version. ge.Status is the HTTP-semantic status: it picks the
// fault code (gatewayFaultCode: Client/Sender for 4xx, Server/Receiver otherwise) and goes
// out in X-Soapgw-Status; mode picks the status line from it. The cause is repeated in the
// X-Soapgw-Error field so scripts need not parse XML.
func faultResponse(dst []byte, ge *gatewayError, mode FaultStatus, v soapVersion, protoMinor int, exchangeID string, close bool) []byte {
	var body bytes.Buffer
	code := gatewayFaultCode(v, ge.Status)
	if v == soap12 {
		body.WriteString(`<?xml version="1.0" encoding="utf-8"?><env:Envelope xmlns:env="http://www.w3.org/2003/05/soap-envelope"><env:Body><env:Fault><env:Code><env:Value>env:`)
		body.WriteString(code)
		body.WriteString(`</env:Value></env:Code><env:Reason><env:Text xml:lang="en">`)
		xml.EscapeText(&body, []byte(ge.Message))
		body.WriteString(`</env:Text></env:Reason><env:Detail>`)
		writeDetail(&body, ge.Cause, exchangeID)
		body.WriteString(`</env:Detail></env:Fault></env:Body></env:Envelope>`)
	} else {
		body.WriteString(`<?xml version="1.0" encoding="utf-8"?><soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><soap:Fault><faultcode>soap:`)
		body.WriteString(code)
		body.WriteString(`</faultcode><faultstring>`)
		xml.EscapeText(&body, []byte(ge.Message))
		body.WriteString(`</faultstring><detail>`)
		writeDetail(&body, ge.Cause, exchangeID)
		body.WriteString(`</detail></soap:Fault></soap:Body></soap:Envelope>`)
	}
	ct := "text/xml; charset=utf-8"
	if v == soap12 {
		ct = "application/soap+xml; charset=utf-8"
	}
	h := httpwire.Header{
		{Name: "Content-Type", Value: ct},
		{Name: "Content-Length", Value: strconv.Itoa(body.Len())},
		{Name: "X-Soapgw-Error", Value: ge.Cause},
		{Name: "X-Soapgw-Status", Value: strconv.Itoa(ge.Status)},
	}
	if exchangeID != "" {
		h = append(h, httpwire.Field{Name: "X-Soapgw-Exchange", Value: exchangeID})
	}
	if close {
		h = append(h, httpwire.Field{Name: "Connection", Value: "close"})
	} else if protoMinor == 0 {
		h = append(h, httpwire.Field{Name: "Connection", Value: "keep-alive"})
	}
	status := mode.statusLine(v, ge.Status)
	dst = httpwire.AppendResponseHead(dst, protoMinor, status, reasonFor(status), h)
	return append(dst, body.Bytes()...)
}

// gatewayFaultCode is the fault code soapgw puts in its own faults, without its prefix:
// Client (SOAP 1.1) or Sender (1.2) when the HTTP-semantic status is a 4xx, Server or
// Receiver otherwise. The Fault and soapgw_soap_faults_total both take it from here, so
// they agree in either FaultStatus mode.
func gatewayFaultCode(v soapVersion, status int) string {
	client := isClientStatus(status)
	switch {
	case v == soap12 && client:
		return "Sender"
	case v == soap12:
		return "Receiver"
	case client:
		return "Client"
	}
	return "Server"
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
