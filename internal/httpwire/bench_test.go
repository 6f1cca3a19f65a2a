package httpwire_test

import (
	"bufio"
	"bytes"
	"io"
	"strconv"
	"testing"

	"github.com/soapgw/soapgw/internal/httpwire"
)

// soapRequest is a typical (about 650 bytes) SOAP 1.1 request as sent by a .NET client.
var soapRequest = func() []byte {
	const envelope = `<?xml version="1.0" encoding="utf-8"?>` +
		`<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/" ` +
		`xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xmlns:xsd="http://www.w3.org/2001/XMLSchema">` +
		`<soap:Body><Add xmlns="http://tempuri.org/"><intA>40</intA><intB>2</intB></Add></soap:Body></soap:Envelope>`
	head := "POST /Calc/Service.asmx HTTP/1.1\r\n" +
		"User-Agent: Mozilla/4.0 (compatible; MSIE 6.0; MS Web Services Client Protocol 4.0.30319.42000)\r\n" +
		"Content-Type: text/xml; charset=utf-8\r\n" +
		"SOAPAction: \"http://tempuri.org/Add\"\r\n" +
		"Host: calc.example.com:8080\r\n" +
		"Content-Length: " + strconv.Itoa(len(envelope)) + "\r\n" +
		"Expect: 100-continue\r\n" +
		"Accept-Encoding: gzip, deflate\r\n" +
		"Connection: Keep-Alive\r\n\r\n"
	return []byte(head + envelope)
}()

func BenchmarkReadRequest(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(soapRequest)))
	r := bytes.NewReader(soapRequest)
	br := bufio.NewReader(r)
	for b.Loop() {
		r.Reset(soapRequest)
		br.Reset(r)
		req, err := httpwire.ReadRequest(br, httpwire.Limits{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendRequestHead(b *testing.B) {
	req, err := httpwire.ReadRequest(bufio.NewReader(bytes.NewReader(soapRequest)), httpwire.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	buf := make([]byte, 0, 1024)
	fwd := make(httpwire.Header, 0, 16)
	for b.Loop() {
		fwd = httpwire.AppendEndToEnd(fwd[:0], req.Header)
		buf = httpwire.AppendRequestHead(buf[:0], req.Method, req.Target, req.ProtoMinor, fwd)
	}
}

// TestReadRequestAllocs pins the allocation budget promised in doc.go: the head string,
// the field slice, and the request with its body reader.
func TestReadRequestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not stable under the race detector")
	}
	r := bytes.NewReader(soapRequest)
	br := bufio.NewReader(r)
	allocs := testing.AllocsPerRun(100, func() {
		r.Reset(soapRequest)
		br.Reset(r)
		req, err := httpwire.ReadRequest(br, httpwire.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 3 {
		t.Fatalf("ReadRequest: %v allocations, want at most 3", allocs)
	}
}
