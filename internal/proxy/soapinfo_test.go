package proxy

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/httpwire"
)

func TestOperationOf(t *testing.T) {
	axisBody := []byte(`<?xml version="1.0"?><soapenv:Envelope xmlns:soapenv="x"><soapenv:Body><!-- c --><ns1:addEntry xmlns:ns1="urn:Diary"><slot>1</slot></ns1:addEntry></soapenv:Body></soapenv:Envelope>`)
	for _, tc := range []struct {
		name string
		h    httpwire.Header
		body []byte
		want string
	}{
		{"soapaction uri", httpwire.Header{{Name: "SOAPAction", Value: `"http://tempuri.org/IService/GetOrders"`}}, nil, "GetOrders"},
		{"soapaction fragment", httpwire.Header{{Name: "soapaction", Value: `"urn:Diary#addEntry"`}}, nil, "addEntry"},
		{"empty soapaction falls back to body", httpwire.Header{{Name: "SOAPAction", Value: `""`}}, axisBody, "addEntry"},
		{"soap12 action param", httpwire.Header{{Name: "Content-Type", Value: `application/soap+xml; charset=utf-8; action="urn:weather/GetForecast"`}}, nil, "GetForecast"},
		{"body without prefix", nil, []byte(`<Envelope><Body><Ping/></Body></Envelope>`), "Ping"},
		{"empty body element", nil, []byte(`<s:Envelope><s:Body></s:Body></s:Envelope>`), ""},
		{"not xml", nil, []byte("hello"), ""},
		{"truncated", nil, []byte(`<s:Envelope><s:Body><ns:op`), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, operationOf(tc.h, tc.body))
		})
	}
}

// TestInternTable: the same bytes give the same string without an allocation once
// seen; past the bound, names are still right, only made anew.
func TestInternTable(t *testing.T) {
	tab := internTable{max: 2}
	body := []byte("addEntry")
	a := tab.intern(body)
	require.Equal(t, "addEntry", a)
	body[0] = 'X' // the table kept a copy, not a view
	require.Equal(t, "addEntry", a)
	require.Equal(t, "XddEntry", tab.intern(body))
	require.Equal(t, "three", tab.intern([]byte("three")))
	require.Len(t, tab.m, 2, "bounded")
	seen := []byte("addEntry")
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = tab.intern(seen) }))
}

func TestFaultCodeOf(t *testing.T) {
	for body, want := range map[string]string{
		`<soap:Fault><faultcode>soap:Server</faultcode>`:                                "Server",
		`<soap:Fault><faultcode xmlns:a="x"> a:Client.Rejected </faultcode>`:            "Client",
		`<env:Fault><env:Code><env:Value>env:Receiver</env:Value><env:Subcode>`:         "Receiver",
		`<env:Fault><env:Code><env:Value>env:Sender</env:Value></env:Code></env:Fault>`: "Sender",
		`<html>oops</html>`: "",
	} {
		require.Equal(t, want, faultCodeOf([]byte(body)), body)
	}
	require.Equal(t, "other", faultLabel("MyOwnCode"))
	require.Equal(t, "Server", faultLabel("Server"))
}

func TestLabelSetBoundsCardinality(t *testing.T) {
	l := newLabelSet(3)
	for i := range 10 {
		got := l.label(fmt.Sprintf("op%d", i))
		if i < 3 {
			require.Equal(t, fmt.Sprintf("op%d", i), got)
		} else {
			require.Equal(t, "other", got)
		}
	}
	require.Equal(t, "op1", l.label("op1"), "known values stay")
	require.Equal(t, "unknown", l.label(""))
	require.Equal(t, "other", l.label("bad label\n"))
}

func FuzzOperationOf(f *testing.F) {
	f.Add([]byte(`<s:Envelope><s:Body><m:op/></s:Body></s:Envelope>`), `"urn:a#b"`)
	f.Add([]byte(`<faultcode>x:y.z</faultcode><env:Code><env:Value>`), ``)
	f.Fuzz(func(t *testing.T, body []byte, action string) {
		_ = operationOf(httpwire.Header{{Name: "SOAPAction", Value: action}}, body)
		_ = faultCodeOf(body)
	})
}
