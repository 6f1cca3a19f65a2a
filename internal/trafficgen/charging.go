package trafficgen

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Elfwing and Paulsson (seed 003): a mobile-phone charging service on
// Axis beta 1 (appendix C): credit, directDebit, reserve, debitReservation,
// releaseReservation (unreserve), creditControl, each client-acknowledged
// with confirm (appendix B.2), and a SOAP 1.2 alert with an alertcontrol
// header (figure 4) when an account runs low.

const chargingHead = `<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
	`<SOAP-ENV:Envelope SOAP-ENV:encodingStyle="http://schemas.xmlsoap.org/soap/encoding/"` + "\n" +
	`  xmlns:SOAP-ENV="http://schemas.xmlsoap.org/soap/envelope/"` + "\n" +
	`  xmlns:xsd="http://www.w3.org/2001/XMLSchema"` + "\n" +
	`  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"` + "\n" +
	`  xmlns:SOAP-ENC="http://schemas.xmlsoap.org/soap/encoding/">` + "\n" +
	"  <SOAP-ENV:Body>\n"

const chargingTail = "  </SOAP-ENV:Body>\n</SOAP-ENV:Envelope>\n"

type intArg struct {
	name string
	v    int
}

func chargingCall(op string, args ...intArg) []byte {
	var b strings.Builder
	b.WriteString(chargingHead)
	b.WriteString("    <" + op + ">\n")
	for _, a := range args {
		fmt.Fprintf(&b, "      <%s xsi:type=\"xsd:int\">%d</%s>\n", a.name, a.v, a.name)
	}
	b.WriteString("    </" + op + ">\n" + chargingTail)
	return []byte(b.String())
}

func chargingReturn(op string, v int) []byte {
	return []byte(fmt.Sprintf("%s    <ns1:%sResponse xmlns:ns1=\"urn:Charging\">\n      <%sReturn xsi:type=\"xsd:int\">%d</%sReturn>\n    </ns1:%sResponse>\n%s",
		chargingHead, op, op, v, op, op, chargingTail))
}

const soap12NS = "http://www.w3.org/2003/05/soap-envelope"

func alertMessage(prio int, expires time.Time, id, balance int) []byte {
	return []byte(`<?xml version="1.0" ?>` + "\n" +
		`<env:Envelope xmlns:env="` + soap12NS + `">` + "\n" +
		"  <env:Header>\n" +
		`    <n:alertcontrol xmlns:n="http://example.org/alertcontrol">` + "\n" +
		fmt.Sprintf("      <n:priority>%d</n:priority>\n", prio) +
		"      <n:expires>" + expires.Format("2006-01-02T15:04:05-07:00") + "</n:expires>\n" +
		"    </n:alertcontrol>\n  </env:Header>\n  <env:Body>\n" +
		`    <m:alert xmlns:m="http://example.org/alert">` + "\n" +
		fmt.Sprintf("      <m:msg>Account %d balance low: %d credits left</m:msg>\n", id, balance) +
		"    </m:alert>\n  </env:Body>\n</env:Envelope>\n")
}

func alertAck() []byte {
	return []byte(`<?xml version="1.0" ?>` + "\n" + `<env:Envelope xmlns:env="` + soap12NS + `">` + "\n  <env:Body/>\n</env:Envelope>\n")
}

func charging(n int, r *rand.Rand) []Message {
	const accounts = 10
	bal := make([]int, accounts)
	for i := range bal {
		bal[i] = 150 + r.IntN(1200)
	}
	res := 12000 + r.IntN(1000) // reservation / transaction ids
	now := time.Date(2002, 6, 3, 9, 0, 0, 0, time.FixedZone("", 2*3600)).Add(time.Duration(r.IntN(3600)) * time.Second)
	var ms []Message
	call := func(op string, ret int, args ...intArg) {
		ms = append(ms, Message{Name: op, Dir: Request, Body: chargingCall(op, args...)},
			Message{Name: op + "Response", Dir: Response, Body: chargingReturn(op, ret)})
	}
	for len(ms) < n {
		now = now.Add(time.Duration(50+r.IntN(2000)) * time.Millisecond)
		id := r.IntN(accounts)
		am := 10 + r.IntN(600)
		res++
		// Weights follow the mix of appendix B.2's five usage patterns.
		switch p := r.IntN(10); {
		case p < 2: // CreditControl: 1 call
			call("creditControl", bal[id], intArg{"id", id})
		case p < 4: // Credit: credit + confirm
			bal[id] += am
			call("credit", res, intArg{"id", id}, intArg{"am", am})
			call("confirm", 0, intArg{"id", id}, intArg{"tx", res})
		case p < 6: // DirectDebit: directDebit + confirm
			bal[id] -= am
			call("directDebit", res, intArg{"id", id}, intArg{"am", am})
			call("confirm", 0, intArg{"id", id}, intArg{"tx", res})
		case p < 8: // ReservationDebit: reserve, confirm, debitReservation, confirm
			call("reserve", res, intArg{"id", id}, intArg{"am", am})
			call("confirm", 0, intArg{"id", id}, intArg{"tx", res})
			bal[id] -= am
			call("debitReservation", bal[id], intArg{"id", id}, intArg{"am", am}, intArg{"res", res})
			call("confirm", 0, intArg{"id", id}, intArg{"tx", res})
		default: // ReservationRelease: reserve, confirm, releaseReservation, confirm
			call("reserve", res, intArg{"id", id}, intArg{"am", am})
			call("confirm", 0, intArg{"id", id}, intArg{"tx", res})
			call("releaseReservation", bal[id], intArg{"id", id}, intArg{"res", res})
			call("confirm", 0, intArg{"id", id}, intArg{"tx", res})
		}
		if bal[id] < 200 {
			ms = append(ms, Message{Name: "alert", Dir: Request, Body: alertMessage(1, now.Add(2*time.Hour), id, bal[id])},
				Message{Name: "alertResponse", Dir: Response, Body: alertAck()})
			bal[id] += 1000 // topped up
		}
	}
	return ms
}
