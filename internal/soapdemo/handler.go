package soapdemo

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

const (
	// maxRequestBody bounds what the example service reads; Stress
	// requests are 652 bytes.
	maxRequestBody = 64 << 10
	contentTypeXML = "text/xml; charset=utf-8"
)

// NewStressHandler returns the example Calendar service of the Stress
// scenario, served at any path:
//
//   - POST with a Stress request: 200 with StressResponse(slot) as
//     text/xml. The entry must be exactly the one of its slot (start, end,
//     subject, location), so a corrupted request is refused.
//   - POST with anything else (not XML, no ns1:addEntry, a wrong entry, a
//     body over 64 KiB): a SOAP 1.1 Fault with faultcode soapenv:Client
//     and HTTP 500, as SOAP 1.1 section 6.2 requires.
//   - GET with ?wsdl: a WSDL 1.1 document describing addEntry.
//   - GET otherwise: Axis's "Hi there" page; other methods: 405.
func NewStressHandler() http.Handler {
	return http.HandlerFunc(serveStress)
}

func serveStress(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		slot, err := parseStressRequest(http.MaxBytesReader(w, r.Body, maxRequestBody))
		if err != nil {
			writeFault(w, "soapenv:Client", err.Error())
			return
		}
		writeXML(w, http.StatusOK, StressResponse(slot))
	case http.MethodGet, http.MethodHead:
		if !wantsWSDL(r) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = io.WriteString(w, "<h1>Calendar</h1><p>Hi there, this is an AXIS service!</p>"+
				"<i>Perhaps there will be a form for invoking the service here...</i>")
			return
		}
		writeXML(w, http.StatusOK, stressWSDL(r.Host, r.URL.Path))
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// wantsWSDL reports a ?wsdl query in any letter case, as Axis accepts it.
func wantsWSDL(r *http.Request) bool {
	for k := range r.URL.Query() {
		if strings.EqualFold(k, "wsdl") {
			return true
		}
	}
	return false
}

func writeXML(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", contentTypeXML)
	// An explicit length lets HTTP/1.0 clients and proxies frame the
	// response without waiting for the close.
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// stressEnvelope is the part of a Stress request the service looks at.
// Fields without a namespace in their tag match the unqualified elements
// Axis writes for RPC parameters.
type stressEnvelope struct {
	XMLName xml.Name `xml:"http://schemas.xmlsoap.org/soap/envelope/ Envelope"`
	Body    struct {
		AddEntry *struct {
			Entry *struct {
				Slot     string `xml:"slot,attr"`
				Start    string `xml:"start"`
				End      string `xml:"end"`
				Subject  string `xml:"subject"`
				Location string `xml:"location"`
			} `xml:"entry"`
		} `xml:"urn:Diary addEntry"`
	} `xml:"http://schemas.xmlsoap.org/soap/envelope/ Body"`
}

// parseStressRequest returns the slot of a well-formed Stress request
// whose entry is exactly the one StressRequest(slot) carries.
func parseStressRequest(r io.Reader) (int, error) {
	body, err := io.ReadAll(r)
	if err != nil {
		return 0, fmt.Errorf("reading request: %w", err)
	}
	var env stressEnvelope
	if err := xml.Unmarshal(body, &env); err != nil {
		return 0, fmt.Errorf("malformed request: %w", err)
	}
	if env.Body.AddEntry == nil || env.Body.AddEntry.Entry == nil {
		return 0, errors.New("malformed request: no {" + StressNamespace + "}addEntry with an entry in the Body")
	}
	e := env.Body.AddEntry.Entry
	slot, err := parseSlot(e.Slot)
	if err != nil {
		return 0, err
	}
	want := stressEntryFor(slot)
	if e.Start != want.start || e.End != want.end || e.Subject != want.subject || e.Location != want.location {
		return 0, fmt.Errorf("entry does not match slot %05d: got %s..%s %q in %q", slot, e.Start, e.End, e.Subject, e.Location)
	}
	return slot, nil
}

// parseSlot accepts exactly five ASCII digits, the fixed width of the
// slot attribute (strconv.Atoi alone would take "+1234").
func parseSlot(s string) (int, error) {
	if len(s) != 5 {
		return 0, fmt.Errorf("malformed request: slot %q is not 5 digits", s)
	}
	slot := 0
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("malformed request: slot %q is not 5 digits", s)
		}
		slot = slot*10 + int(c-'0')
	}
	return slot, nil
}

// writeFault answers a SOAP 1.1 Fault in Axis 1.0's layout with HTTP 500.
func writeFault(w http.ResponseWriter, code, reason string) {
	var b bytes.Buffer
	b.WriteString(envelopeHead)
	b.WriteString("  <soapenv:Fault>\n   <faultcode>")
	b.WriteString(code)
	b.WriteString("</faultcode>\n   <faultstring>")
	_ = xml.EscapeText(&b, []byte(reason)) // writes to a bytes.Buffer cannot fail
	b.WriteString("</faultstring>\n   <detail/>\n  </soapenv:Fault>\n")
	b.WriteString(envelopeTail)
	writeXML(w, http.StatusInternalServerError, b.Bytes())
}

// stressWSDL describes the service as Axis 1.0 would: rpc/encoded, one
// operation, located at the address the client used.
func stressWSDL(host, path string) []byte {
	var loc bytes.Buffer
	_ = xml.EscapeText(&loc, []byte("http://"+host+path))
	return []byte(`<?xml version="1.0" encoding="UTF-8"?>
<wsdl:definitions targetNamespace="` + StressNamespace + `" xmlns:impl="` + StressNamespace + `"` +
		` xmlns:wsdl="http://schemas.xmlsoap.org/wsdl/" xmlns:wsdlsoap="http://schemas.xmlsoap.org/wsdl/soap/"` +
		` xmlns:soapenc="` + soapEncoding + `" xmlns:xsd="http://www.w3.org/2001/XMLSchema">
 <wsdl:message name="addEntryRequest">
  <wsdl:part name="entry" type="xsd:anyType"/>
 </wsdl:message>
 <wsdl:message name="addEntryResponse">
  <wsdl:part name="addEntryReturn" type="xsd:anyType"/>
 </wsdl:message>
 <wsdl:portType name="Calendar">
  <wsdl:operation name="addEntry" parameterOrder="entry">
   <wsdl:input message="impl:addEntryRequest" name="addEntryRequest"/>
   <wsdl:output message="impl:addEntryResponse" name="addEntryResponse"/>
  </wsdl:operation>
 </wsdl:portType>
 <wsdl:binding name="CalendarSoapBinding" type="impl:Calendar">
  <wsdlsoap:binding style="rpc" transport="http://schemas.xmlsoap.org/soap/http"/>
  <wsdl:operation name="addEntry">
   <wsdlsoap:operation soapAction=""/>
   <wsdl:input name="addEntryRequest">
    <wsdlsoap:body encodingStyle="` + soapEncoding + `" namespace="` + StressNamespace + `" use="encoded"/>
   </wsdl:input>
   <wsdl:output name="addEntryResponse">
    <wsdlsoap:body encodingStyle="` + soapEncoding + `" namespace="` + StressNamespace + `" use="encoded"/>
   </wsdl:output>
  </wsdl:operation>
 </wsdl:binding>
 <wsdl:service name="CalendarService">
  <wsdl:port binding="impl:CalendarSoapBinding" name="Calendar">
   <wsdlsoap:address location="` + loc.String() + `"/>
  </wsdl:port>
 </wsdl:service>
</wsdl:definitions>`)
}
