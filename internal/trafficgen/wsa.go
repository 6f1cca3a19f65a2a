package trafficgen

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// wsa is SOAP 1.2 with WS-Addressing as a WCF (.NET) client and service emit it over
// wsHttpBinding without security: no XML declaration, no whitespace, an Action and a
// fresh urn:uuid MessageID on every request, RelatesTo on every response. The issue's
// "SOAP 1.2 messages with WS-Addressing ids" target (≈7.8 % with stream-context zstd)
// is measured on it: the random uuids are what a cross-message model cannot predict.

const (
	wsaSvc  = "http://tempuri.org/IOrderService/"
	wsaTo   = "http://orders.example.com/OrderService.svc"
	wsaHead = `<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope" xmlns:a="http://www.w3.org/2005/08/addressing"><s:Header>`
)

func uuidOf(r *rand.Rand) string {
	var b [16]byte
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func wsaRequest(op, id, body string) []byte {
	return []byte(wsaHead +
		`<a:Action s:mustUnderstand="1">` + wsaSvc + op + `</a:Action>` +
		`<a:MessageID>` + id + `</a:MessageID>` +
		`<a:ReplyTo><a:Address>http://www.w3.org/2005/08/addressing/anonymous</a:Address></a:ReplyTo>` +
		`<a:To s:mustUnderstand="1">` + wsaTo + `</a:To></s:Header>` +
		`<s:Body><` + op + ` xmlns="http://tempuri.org/">` + body + `</` + op + `></s:Body></s:Envelope>`)
}

func wsaResponse(op, relatesTo, body string) []byte {
	return []byte(wsaHead +
		`<a:Action s:mustUnderstand="1">` + wsaSvc + op + `Response</a:Action>` +
		`<a:RelatesTo>` + relatesTo + `</a:RelatesTo></s:Header>` +
		`<s:Body><` + op + `Response xmlns="http://tempuri.org/"><` + op + `Result xmlns:b="http://schemas.datacontract.org/2004/07/Orders" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">` +
		body + `</` + op + `Result></` + op + `Response></s:Body></s:Envelope>`)
}

var wsaCustomers = []string{"ALFKI", "ANATR", "ANTON", "AROUT", "BERGS", "BLAUS", "BLONP", "BOLID", "BONAP", "BOTTM"}

func wsa(n int, r *rand.Rand) []Message {
	order := 10248 + r.IntN(100)
	now := time.Date(2011, 3, 14, 8, 0, 0, 0, time.UTC).Add(time.Duration(r.IntN(3600)) * time.Second)
	var ms []Message
	for len(ms) < n {
		now = now.Add(time.Duration(200+r.IntN(5000)) * time.Millisecond)
		id := uuidOf(r)
		cust := wsaCustomers[r.IntN(len(wsaCustomers))]
		var op, req, resp string
		switch p := r.IntN(10); {
		case p < 5:
			op = "GetOrderStatus"
			o := order - r.IntN(50)
			req = fmt.Sprintf("<orderId>%d</orderId>", o)
			resp = fmt.Sprintf("<b:OrderId>%d</b:OrderId><b:Shipped>%s</b:Shipped><b:Status>%s</b:Status>",
				o, now.Add(-time.Duration(r.IntN(96))*time.Hour).Format("2006-01-02T15:04:05.0000000Z"),
				[]string{"Pending", "Shipped", "Delivered"}[r.IntN(3)])
		case p < 8:
			op = "GetCustomer"
			req = "<customerId>" + cust + "</customerId>"
			resp = "<b:CustomerId>" + cust + "</b:CustomerId><b:CompanyName>" + strings.ToUpper(cust[:1]) + strings.ToLower(cust[1:]) +
				" Handels GmbH</b:CompanyName><b:Country>Germany</b:Country>"
		default:
			op = "PlaceOrder"
			order++
			req = fmt.Sprintf("<order xmlns:b=\"http://schemas.datacontract.org/2004/07/Orders\" xmlns:i=\"http://www.w3.org/2001/XMLSchema-instance\"><b:CustomerId>%s</b:CustomerId><b:OrderDate>%s</b:OrderDate><b:ProductId>%d</b:ProductId><b:Quantity>%d</b:Quantity></order>",
				cust, now.Format("2006-01-02T15:04:05.0000000Z"), 1+r.IntN(77), 1+r.IntN(40))
			resp = fmt.Sprintf("<b:OrderId>%d</b:OrderId><b:Status>Pending</b:Status>", order)
		}
		ms = append(ms, Message{Name: op, Dir: Request, Body: wsaRequest(op, id, req)},
			Message{Name: op + "Response", Dir: Response, Body: wsaResponse(op, id, resp)})
	}
	return ms
}
