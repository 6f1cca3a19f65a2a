//go:build ignore

// gen writes static_table.go: the strings both ends know before the
// first message (SOAP 1.1/1.2, WS-Addressing, WS-Security, XML
// Signature/Encryption, XSD/XSI/SOAP-ENC names, common namespace URIs and
// XML declaration forms). Run with `go generate`. Appending strings is
// a wire-format change: both ends must run the same table.
package main

import (
	"bytes"
	"fmt"
	"go/format"
	"log"
	"os"
)

var decls = []string{
	`<?xml version="1.0" encoding="UTF-8"?>`,
	`<?xml version="1.0" encoding="utf-8"?>`,
	`<?xml version='1.0' encoding='UTF-8'?>`,
	`<?xml version='1.0' encoding='utf-8'?>`,
	`<?xml version="1.0" encoding="UTF-8" standalone="yes"?>`,
	`<?xml version="1.0" encoding="ISO-8859-1"?>`,
	`<?xml version="1.0"?>`,
	`<?xml version="1.0" ?>`,
	`<?xml version='1.0'?>`,
}

var uris = []string{
	"http://schemas.xmlsoap.org/soap/envelope/",
	"http://schemas.xmlsoap.org/soap/encoding/",
	"http://www.w3.org/2003/05/soap-envelope",
	"http://www.w3.org/2003/05/soap-encoding",
	"http://www.w3.org/2003/05/soap-rpc",
	"http://www.w3.org/2003/05/soap-envelope/role/next",
	"http://www.w3.org/2003/05/soap-envelope/role/none",
	"http://www.w3.org/2003/05/soap-envelope/role/ultimateReceiver",
	"http://schemas.xmlsoap.org/soap/actor/next",
	"http://www.w3.org/2001/XMLSchema",
	"http://www.w3.org/2001/XMLSchema-instance",
	"http://www.w3.org/1999/XMLSchema",
	"http://www.w3.org/1999/XMLSchema-instance",
	"http://www.w3.org/XML/1998/namespace",
	"http://www.w3.org/2000/xmlns/",
	"http://schemas.xmlsoap.org/ws/2004/08/addressing",
	"http://schemas.xmlsoap.org/ws/2004/08/addressing/role/anonymous",
	"http://www.w3.org/2005/08/addressing",
	"http://www.w3.org/2005/08/addressing/anonymous",
	"http://www.w3.org/2005/08/addressing/none",
	"http://www.w3.org/2005/08/addressing/fault",
	"http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd",
	"http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd",
	"http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#PasswordDigest",
	"http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#PasswordText",
	"http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0",
	"http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary",
	"http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-x509-token-profile-1.0#X509v3",
	"http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-x509-token-profile-1.0",
	"http://docs.oasis-open.org/wss/oasis-wss-soap-message-security-1.1#EncryptedKey",
	"http://docs.oasis-open.org/wss/oasis-wss-wssecurity-secext-1.1.xsd",
	"http://www.w3.org/2000/09/xmldsig#",
	"http://www.w3.org/2000/09/xmldsig#sha1",
	"http://www.w3.org/2000/09/xmldsig#rsa-sha1",
	"http://www.w3.org/2000/09/xmldsig#hmac-sha1",
	"http://www.w3.org/2000/09/xmldsig#enveloped-signature",
	"http://www.w3.org/2001/04/xmldsig-more#rsa-sha256",
	"http://www.w3.org/2001/04/xmlenc#",
	"http://www.w3.org/2001/04/xmlenc#sha256",
	"http://www.w3.org/2001/04/xmlenc#aes128-cbc",
	"http://www.w3.org/2001/04/xmlenc#aes256-cbc",
	"http://www.w3.org/2001/04/xmlenc#rsa-oaep-mgf1p",
	"http://www.w3.org/2001/04/xmlenc#Content",
	"http://www.w3.org/2001/04/xmlenc#Element",
	"http://www.w3.org/2001/10/xml-exc-c14n#",
	"http://www.w3.org/TR/2001/REC-xml-c14n-20010315",
	"http://www.w3.org/2004/08/xop/include",
	"http://www.w3.org/2005/05/xmlmime",
	"http://schemas.xmlsoap.org/wsdl/",
	"http://schemas.xmlsoap.org/wsdl/soap/",
	"http://schemas.xmlsoap.org/soap/http",
	"http://xml.apache.org/axis/",
	"http://xml.apache.org/axis/wsdd/",
	"http://xml.apache.org/axis/wsdd/providers/java",
	"http://tempuri.org/",
	"urn:schemas-microsoft-com:xml-msdata",
	"urn:schemas-microsoft-com:xml-diffgram-v1",
}

var prefixes = []string{"soapenv", "soap", "SOAP-ENV", "env", "S", "s", "soap12", "SOAP"}

var envNames = []string{"Envelope", "Header", "Body", "Fault"}

var names = []string{
	"xmlns:xsd", "xmlns:xsi", "xmlns:SOAP-ENC", "xmlns:soapenc", "xmlns:enc",
	"xmlns:wsa", "xmlns:wsse", "xmlns:wsu", "xmlns:ds", "xmlns:xenc", "xmlns:ns1", "xmlns:ns2", "xmlns:ns",
	"xmlns:m", "xmlns:tns", "xmlns:xop", "xmlns:xmime", "xmlns=",
	"encodingStyle", "mustUnderstand", "actor", "role", "relay",
	"faultcode", "faultstring", "faultactor", "detail",
	"env:Code", "env:Value", "env:Subcode", "env:Reason", "env:Text", "env:Node", "env:Role", "env:Detail",
	"env:Sender", "env:Receiver", "env:MustUnderstand", "env:VersionMismatch", "env:DataEncodingUnknown",
	"soapenv:Server", "soapenv:Client", "soap:Server", "soap:Client",
	"xsi:type", "xsi:nil", "xsi:schemaLocation", "xsi:noNamespaceSchemaLocation",
	"xsd:string", "xsd:int", "xsd:long", "xsd:short", "xsd:boolean", "xsd:double", "xsd:float",
	"xsd:dateTime", "xsd:date", "xsd:time", "xsd:decimal", "xsd:integer", "xsd:base64Binary", "xsd:anyType",
	"xs:string", "xs:int", "xs:dateTime", "xs:decimal", "xs:element", "xs:complexType", "xs:sequence", "xs:choice", "xs:schema",
	"soapenc:Array", "soapenc:arrayType", "SOAP-ENC:Array", "SOAP-ENC:arrayType", "soapenc:root",
	"multiRef", "href=\"#id", "id=\"id",
	"wsa:To", "wsa:Action", "wsa:MessageID", "wsa:RelatesTo", "wsa:ReplyTo", "wsa:FaultTo", "wsa:From", "wsa:Address",
	"urn:uuid:", "uuid:",
	"wsse:Security", "wsse:UsernameToken", "wsse:Username", "wsse:Password", "wsse:Nonce",
	"wsse:BinarySecurityToken", "wsse:SecurityTokenReference", "wsse:Reference", "wsse:KeyIdentifier",
	"wsu:Timestamp", "wsu:Created", "wsu:Expires", "wsu:Id",
	"ds:Signature", "ds:SignedInfo", "ds:CanonicalizationMethod", "ds:SignatureMethod", "ds:Reference",
	"ds:Transforms", "ds:Transform", "ds:DigestMethod", "ds:DigestValue", "ds:SignatureValue",
	"ds:KeyInfo", "ds:X509Data", "ds:X509Certificate",
	"xenc:EncryptedData", "xenc:EncryptedKey", "xenc:CipherData", "xenc:CipherValue",
	"xenc:EncryptionMethod", "xenc:ReferenceList", "xenc:DataReference",
	"EncodingType", "ValueType", "Algorithm", "URI=\"#", "Type=\"", "xml:lang",
	"true", "false", "Content-Type: ", "Content-ID: ", "Content-Transfer-Encoding: binary",
	"application/xop+xml", "application/soap+xml", "text/xml", "charset=UTF-8", "application/octet-stream",
	"xop:Include",
}

func main() {
	seen := map[string]bool{}
	var all []string
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			all = append(all, s)
		}
	}
	for _, s := range decls {
		add(s)
	}
	for _, s := range uris {
		add(s)
	}
	for _, p := range prefixes {
		add("xmlns:" + p)
		for _, n := range envNames {
			add(p + ":" + n)
		}
	}
	for _, s := range names {
		add(s)
	}
	if len(all) >= 1<<10 {
		log.Fatalf("%d static strings: the piece index has 10 bits", len(all))
	}
	var b bytes.Buffer
	b.WriteString("// Code generated by gen.go; DO NOT EDIT.\n\npackage xmltok\n\n")
	b.WriteString("// staticTable holds the strings both ends know before the first\n// message; id i+1 is staticTable[i]. Part of the wire format.\n")
	b.WriteString("var staticTable = [...]string{\n")
	for _, s := range all {
		fmt.Fprintf(&b, "\t%q,\n", s)
	}
	b.WriteString("}\n")
	src, err := format.Source(b.Bytes())
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("static_table.go", src, 0o644); err != nil {
		log.Fatal(err)
	}
}
