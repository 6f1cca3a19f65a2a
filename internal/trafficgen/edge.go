package trafficgen

import (
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Edge cases a transparent gateway must pass through byte for byte. Each
// is one message; the order is fixed and the big one comes last.

type edgeCase struct {
	name, dir string
	body      func(r *rand.Rand) string
}

var edgeCases = []edgeCase{
	{"wsse-usernametoken-signature", Request, edgeWSSecurity},
	{"non-ascii", Request, edgeNonASCII},
	{"cdata", Request, edgeCDATA},
	{"comments", Request, edgeComments},
	{"processing-instructions", Request, edgePIs},
	{"single-quoted-attributes", Request, edgeSingleQuoted},
	{"entity-and-char-refs", Response, edgeRefs},
	{"namespace-redeclaration", Request, edgeNamespaces},
	{"soap11-fault", Response, edgeFault11},
	{"soap12-fault", Response, edgeFault12},
	{"mtom-multipart", Request, edgeMTOM},
	{"malformed-xml", Request, edgeMalformed},
	{"non-xml", Response, edgeNonXML},
	{BigName, Request, edgeDoubles},
}

// MTOMContentType is the HTTP Content-Type that goes with the
// mtom-multipart edge case's body.
const MTOMContentType = `multipart/related; type="application/xop+xml"; ` +
	`boundary="uuid:0ca0e16e-feb1-426c-97d8-c4508ada5e82"; start="<root.message@cxf.apache.org>"; start-info="text/xml"`

func edge(n int, r *rand.Rand) []Message {
	var ms []Message
	for _, c := range edgeCases[:min(n, len(edgeCases))] {
		ms = append(ms, Message{Name: c.name, Dir: c.dir, Body: []byte(c.body(r))})
	}
	return ms
}

func randB64(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.UintN(256))
	}
	return base64.StdEncoding.EncodeToString(b)
}

func edgeTime(r *rand.Rand) time.Time {
	return time.Date(2024, 3, 14, 9, 0, 0, 0, time.UTC).Add(time.Duration(r.IntN(86400*30)) * time.Second)
}

func edgeWSSecurity(r *rand.Rand) string {
	created := edgeTime(r)
	const (
		wsse = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd"
		wsu  = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd"
		tok  = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0"
		x509 = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-x509-token-profile-1.0"
		ds   = "http://www.w3.org/2000/09/xmldsig#"
	)
	c14n := `<ds:CanonicalizationMethod Algorithm="http://www.w3.org/2001/10/xml-exc-c14n#"/>`
	return `<?xml version="1.0" encoding="UTF-8"?>` +
		`<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" xmlns:wsse="` + wsse + `" xmlns:wsu="` + wsu + `">` +
		`<soapenv:Header><wsse:Security soapenv:mustUnderstand="1">` +
		`<wsu:Timestamp wsu:Id="TS-1"><wsu:Created>` + created.Format("2006-01-02T15:04:05.000Z") + `</wsu:Created>` +
		`<wsu:Expires>` + created.Add(5*time.Minute).Format("2006-01-02T15:04:05.000Z") + `</wsu:Expires></wsu:Timestamp>` +
		`<wsse:BinarySecurityToken EncodingType="` + wsse[:len(wsse)-len("wssecurity-secext-1.0.xsd")] + `soap-message-security-1.0#Base64Binary" ValueType="` + x509 + `#X509v3" wsu:Id="X509-1">` +
		randB64(r, 600) + `</wsse:BinarySecurityToken>` +
		`<wsse:UsernameToken wsu:Id="UsernameToken-2"><wsse:Username>svc-billing</wsse:Username>` +
		`<wsse:Password Type="` + tok + `#PasswordDigest">` + randB64(r, 20) + `</wsse:Password>` +
		`<wsse:Nonce EncodingType="` + wsse[:len(wsse)-len("wssecurity-secext-1.0.xsd")] + `soap-message-security-1.0#Base64Binary">` + randB64(r, 16) + `</wsse:Nonce>` +
		`<wsu:Created>` + created.Format("2006-01-02T15:04:05.000Z") + `</wsu:Created></wsse:UsernameToken>` +
		`<ds:Signature xmlns:ds="` + ds + `" Id="SIG-3"><ds:SignedInfo>` + c14n +
		`<ds:SignatureMethod Algorithm="http://www.w3.org/2001/04/xmldsig-more#rsa-sha256"/>` +
		`<ds:Reference URI="#id-4"><ds:Transforms><ds:Transform Algorithm="http://www.w3.org/2001/10/xml-exc-c14n#"/></ds:Transforms>` +
		`<ds:DigestMethod Algorithm="http://www.w3.org/2001/04/xmlenc#sha256"/><ds:DigestValue>` + randB64(r, 32) + `</ds:DigestValue></ds:Reference>` +
		`<ds:Reference URI="#TS-1"><ds:Transforms><ds:Transform Algorithm="http://www.w3.org/2001/10/xml-exc-c14n#"/></ds:Transforms>` +
		`<ds:DigestMethod Algorithm="http://www.w3.org/2001/04/xmlenc#sha256"/><ds:DigestValue>` + randB64(r, 32) + `</ds:DigestValue></ds:Reference>` +
		`</ds:SignedInfo><ds:SignatureValue>` + randB64(r, 256) + `</ds:SignatureValue>` +
		`<ds:KeyInfo><wsse:SecurityTokenReference><wsse:Reference URI="#X509-1" ValueType="` + x509 + `#X509v3"/>` +
		`</wsse:SecurityTokenReference></ds:KeyInfo></ds:Signature></wsse:Security></soapenv:Header>` +
		`<soapenv:Body wsu:Id="id-4"><ns1:getBalance xmlns:ns1="urn:Billing"><account>` + strconv.Itoa(100000+r.IntN(900000)) +
		`</account></ns1:getBalance></soapenv:Body></soapenv:Envelope>`
}

const s11 = `<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
	`<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"><soapenv:Body>`
const s11End = "</soapenv:Body></soapenv:Envelope>\n"

func edgeNonASCII(r *rand.Rand) string {
	return s11 + `<m:addContact xmlns:m="urn:Contacts"><name>Jürgen Müller-Lüdenscheidt</name>` +
		`<alias>山田 太郎</alias><city>Zürich</city><note>Ελληνικά, русский, עברית, العربية, हिन्दी — “quoted” ½ € ✓ 😀</note>` +
		`<ref>` + strconv.Itoa(r.IntN(1e6)) + `</ref><ünïcödé-tag attr="naïve café">ok</ünïcödé-tag></m:addContact>` + s11End
}

func edgeCDATA(r *rand.Rand) string {
	return s11 + `<m:submitScript xmlns:m="urn:Jobs"><id>` + strconv.Itoa(r.IntN(1e5)) + `</id>` +
		`<script><![CDATA[if (a < b && c > d) { print("<not-a-tag attr='x'>&amp;</not-a-tag>"); } // ]] > ]]]]><![CDATA[>]]></script>` +
		`<html><![CDATA[<html><body><p>Hello & goodbye</p></body></html>]]></html><empty><![CDATA[]]></empty></m:submitScript>` + s11End
}

func edgeComments(r *rand.Rand) string {
	return `<?xml version="1.0" encoding="UTF-8"?>` + "\n<!-- generated by soapgw testdata/gen -->\n" +
		`<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"><!-- before header -->` +
		`<soapenv:Header><!-- empty header --></soapenv:Header><soapenv:Body>` +
		`<m:ping xmlns:m="urn:Ping"><!-- a comment with <tags> & ampersands - and a single dash --><seq>` +
		strconv.Itoa(r.IntN(1e6)) + `</seq><!----></m:ping><!--
multi-line
comment
--></soapenv:Body></soapenv:Envelope>` + "\n<!-- trailing comment -->\n"
}

func edgePIs(r *rand.Rand) string {
	return `<?xml version="1.0" encoding="UTF-8" standalone="yes"?>` + "\n" +
		`<?xml-stylesheet type="text/xsl" href="soap.xsl"?>` + "\n" +
		`<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"><soapenv:Body>` +
		`<?app-trace id="` + strconv.Itoa(r.IntN(1e6)) + `"?><m:ping xmlns:m="urn:Ping"><?php echo "x"; ?><seq>1</seq></m:ping>` +
		s11End + "<?trailer done?>\n"
}

func edgeSingleQuoted(r *rand.Rand) string {
	return `<?xml version='1.0' encoding='UTF-8'?>` + "\n" +
		`<soapenv:Envelope xmlns:soapenv='http://schemas.xmlsoap.org/soap/envelope/' xmlns:xsi='http://www.w3.org/2001/XMLSchema-instance'>` +
		`<soapenv:Body><m:setLabel xmlns:m='urn:Labels' id='` + strconv.Itoa(r.IntN(1e4)) + `'>` +
		`<label lang='en' text='He said "hi"' xsi:type='xsd:string' xmlns:xsd='http://www.w3.org/2001/XMLSchema'/>` +
		`<label lang="fr" text='l&apos;été' mixed="it's"/></m:setLabel></soapenv:Body></soapenv:Envelope>`
}

func edgeRefs(r *rand.Rand) string {
	return s11 + `<m:echoResponse xmlns:m="urn:Echo" note="a &amp; b &lt; c &gt; d &quot;q&quot; &apos;s&apos; &#9;tab&#10;nl">` +
		`<text>Fish &amp; Chips &lt;b&gt;bold&lt;/b&gt; &#169; 2024 &#x20AC;` + strconv.Itoa(r.IntN(1000)) + ` &#x1F600; &#65;&#x42;C ]]&gt;</text>` +
		`<crlf>line1&#13;&#10;line2</crlf></m:echoResponse>` + s11End
}

func edgeNamespaces(r *rand.Rand) string {
	return `<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
		`<S:Envelope xmlns:S="http://schemas.xmlsoap.org/soap/envelope/" xmlns="urn:outer" xmlns:a="urn:a1">` +
		`<S:Header><a:h xmlns:a="urn:a2">rebound a</a:h></S:Header>` +
		`<S:Body><op xmlns="urn:Orders"><a:item xmlns:a="urn:a3"><a:id>` + strconv.Itoa(r.IntN(1e5)) + `</a:id>` +
		`<plain xmlns="">no namespace</plain><S:nested xmlns:S="urn:not-soap">S rebound</S:nested></a:item>` +
		`<a:item><a:id>2</a:id></a:item><x:y xmlns:x="urn:Orders">same as default</x:y></op></S:Body></S:Envelope>`
}

func edgeFault11(r *rand.Rand) string {
	return s11 + `<soapenv:Fault><faultcode>soapenv:Server.userException</faultcode>` +
		`<faultstring>java.rmi.RemoteException: Account ` + strconv.Itoa(r.IntN(1e4)) + ` not found</faultstring>` +
		`<faultactor>http://billing.example.org/axis/services/Charging</faultactor>` +
		`<detail><ns1:hostname xmlns:ns1="http://xml.apache.org/axis/">app01</ns1:hostname></detail></soapenv:Fault>` + s11End
}

func edgeFault12(r *rand.Rand) string {
	return `<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
		`<env:Envelope xmlns:env="` + soap12NS + `" xmlns:rpc="http://www.w3.org/2003/05/soap-rpc">` +
		`<env:Body><env:Fault><env:Code><env:Value>env:Sender</env:Value>` +
		`<env:Subcode><env:Value>rpc:BadArguments</env:Value></env:Subcode></env:Code>` +
		`<env:Reason><env:Text xml:lang="en-US">Processing error</env:Text><env:Text xml:lang="cs">Chyba zpracování</env:Text></env:Reason>` +
		`<env:Node>http://charging.example.org/node</env:Node><env:Role>http://www.w3.org/2003/05/soap-envelope/role/ultimateReceiver</env:Role>` +
		`<env:Detail><e:myFaultDetails xmlns:e="http://example.org/faults"><e:message>Amount must be positive</e:message>` +
		`<e:errorcode>` + strconv.Itoa(1000+r.IntN(9000)) + `</e:errorcode></e:myFaultDetails></env:Detail></env:Fault></env:Body></env:Envelope>`
}

func edgeMTOM(r *rand.Rand) string {
	const boundary = "uuid:0ca0e16e-feb1-426c-97d8-c4508ada5e82"
	bin := make([]byte, 1024)
	for i := range bin {
		bin[i] = byte(r.UintN(256))
	}
	copy(bin, "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR") // a binary part with NULs and CRLFs
	return "\r\n--" + boundary + "\r\n" +
		`Content-Type: application/xop+xml; charset=UTF-8; type="text/xml"` + "\r\n" +
		"Content-Transfer-Encoding: binary\r\nContent-ID: <root.message@cxf.apache.org>\r\n\r\n" +
		`<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body>` +
		`<ns2:uploadImage xmlns:ns2="urn:Images"><name>scan.png</name><data>` +
		`<xop:Include xmlns:xop="http://www.w3.org/2004/08/xop/include" href="cid:1f2a7b3c-image@example.org"/>` +
		"</data></ns2:uploadImage></soap:Body></soap:Envelope>\r\n" +
		"--" + boundary + "\r\n" +
		"Content-Type: application/octet-stream\r\nContent-Transfer-Encoding: binary\r\n" +
		"Content-ID: <1f2a7b3c-image@example.org>\r\n\r\n" + string(bin) + "\r\n" +
		"--" + boundary + "--\r\n"
}

func edgeMalformed(r *rand.Rand) string {
	return s11 + `<m:order xmlns:m="urn:Orders"><id>` + strconv.Itoa(r.IntN(1e5)) + `</id>` +
		`<qty>3</quantity><note>AT&T <unclosed attr="1>` + "\n</soapenv:Body>"
}

func edgeNonXML(r *rand.Rand) string {
	return "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n" +
		fmt.Sprintf("<hr><center>nginx/1.24.0</center>&nbsp;request id %016x\r\n</body>\r\n</html>\r\n", r.Uint64())
}

// edgeDoubles is an Axis-style SOAP-encoded array of doubles of at least
// 2 MiB, like the scientific-computing arrays of the papers' related work.
func edgeDoubles(r *rand.Rand) string {
	const size = 2 << 20
	var items strings.Builder
	items.Grow(size + 4096)
	count := 0
	v := 1000 * r.Float64()
	for items.Len() < size-500 {
		v += r.NormFloat64()
		items.WriteString("<item>")
		items.WriteString(strconv.FormatFloat(v, 'E', -1, 64))
		items.WriteString("</item>\n")
		count++
	}
	return axisHead + `  <ns1:process soapenv:encodingStyle="` + soapEnc + `" xmlns:ns1="urn:Science">` + "\n" +
		`   <data xsi:type="soapenc:Array" soapenc:arrayType="xsd:double[` + strconv.Itoa(count) + `]" xmlns:soapenc="` + soapEnc + `">` + "\n" +
		items.String() + "   </data>\n  </ns1:process>\n" + axisTail
}
