package wsdl

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func readFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	require.NoError(t, err)
	return b
}

func TestOneWay(t *testing.T) {
	for _, tc := range []struct {
		file string
		want []Operation
	}{
		// Published by Debian's python3-spyne for e2e/soapstack/server.py: document/literal
		// wrapped, notify declared with _is_async (no output).
		{"spyne.wsdl", []Operation{{Name: "notify", BodyElement: "notify"}}},
		// rpc style: the body element is the operation's name; two SOAP bindings and an
		// HTTP one give it once.
		{"audit-rpc.wsdl", []Operation{{Name: "Record", BodyElement: "Record"}}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			got, err := OneWay(readFile(t, tc.file))
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// A document-style one-way operation whose input element is also another operation's is
// told apart by its SOAPAction when that differs, and refused when it does not.
func TestOneWaySharedBodyElement(t *testing.T) {
	doc := func(actionA, actionB string) []byte {
		return []byte(`<definitions xmlns="http://schemas.xmlsoap.org/wsdl/" xmlns:s="http://schemas.xmlsoap.org/wsdl/soap/" xmlns:t="urn:t">
<message name="in"><part name="p" element="t:Order"/></message>
<message name="out"><part name="p" element="t:Ack"/></message>
<portType name="P">
 <operation name="Submit"><input message="t:in"/></operation>
 <operation name="SubmitAndWait"><input message="t:in"/><output message="t:out"/></operation>
</portType>
<binding name="B" type="t:P"><s:binding style="document"/>
 <operation name="Submit"><s:operation soapAction="` + actionA + `"/></operation>
 <operation name="SubmitAndWait"><s:operation soapAction="` + actionB + `"/></operation>
</binding>
</definitions>`)
	}
	got, err := OneWay(doc("urn:submit", "urn:submitAndWait"))
	require.NoError(t, err)
	require.Equal(t, []Operation{{Name: "Submit", BodyElement: "Order", Action: "urn:submit"}}, got)

	_, err = OneWay(doc("", "urn:submitAndWait"))
	require.ErrorContains(t, err, "cannot be told from operation SubmitAndWait")
	_, err = OneWay(doc("urn:same", "urn:same"))
	require.ErrorContains(t, err, "cannot be told from operation SubmitAndWait")
}

func TestOneWayRejects(t *testing.T) {
	spyne := string(readFile(t, "spyne.wsdl"))
	for name, tc := range map[string]struct {
		doc, want string
	}{
		"not xml":          {"hello", "wsdl:"},
		"not wsdl":         {`<html><body/></html>`, "not a WSDL 1.1 document"},
		"wsdl 2.0":         {`<description xmlns="http://www.w3.org/ns/wsdl"/>`, "not a WSDL 1.1 document"},
		"no one-way":       {strings.Replace(spyne, `<wsdl:input name="notify" message="tns:notify"/>`, `<wsdl:input name="notify" message="tns:notify"/><wsdl:output message="tns:echoResponse"/>`, 1), "no one-way operation"},
		"missing message":  {strings.Replace(spyne, `<wsdl:message name="notify">`, `<wsdl:message name="notifyX">`, 1), "input message tns:notify is not defined"},
		"trailing junk":    {spyne + "<more/>", "after the definitions element"},
		"unknown portType": {strings.Replace(spyne, `type="tns:SoapgwE2E"`, `type="tns:Other"`, 1), "portType tns:Other"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := OneWay([]byte(tc.doc))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func FuzzOneWay(f *testing.F) {
	f.Add(readFile(f, "spyne.wsdl"))
	f.Add(readFile(f, "audit-rpc.wsdl"))
	f.Add([]byte(`<definitions xmlns="http://schemas.xmlsoap.org/wsdl/"/>`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		ops, err := OneWay(doc)
		if err == nil && len(ops) == 0 {
			t.Fatal("no error and no operation")
		}
		for _, op := range ops {
			if op.BodyElement == "" || strings.Contains(op.BodyElement, ":") {
				t.Fatalf("operation %+v: body element must be a local name", op)
			}
		}
	})
}
