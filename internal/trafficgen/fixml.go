package trafficgen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// Kohlhoff and Steele (seed 001): FIX "market data incremental refresh"
// trade reports of 1-10 MDEntry items as FIXML in gSOAP-generated SOAP.
// The paper measures 639 bytes fixed plus 386.9 bytes per entry.

type instrument struct {
	sym   string
	price float64
}

var asx = []instrument{
	{"CBG", 6.35}, {"BHP", 13.62}, {"NAB", 27.10}, {"ANZ", 19.84}, {"WBC", 17.25}, {"TLS", 4.93},
	{"RIO", 36.40}, {"WOW", 15.01}, {"AMP", 7.12}, {"QAN", 4.38}, {"WMC", 8.76}, {"CML", 10.45},
}

const gsoapHead = `<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
	`<SOAP-ENV:Envelope xmlns:SOAP-ENV="http://schemas.xmlsoap.org/soap/envelope/"` +
	` xmlns:SOAP-ENC="http://schemas.xmlsoap.org/soap/encoding/"` +
	` xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"` +
	` xmlns:xsd="http://www.w3.org/2001/XMLSchema"` +
	` xmlns:ns="urn:fixml">` +
	`<SOAP-ENV:Body SOAP-ENV:encodingStyle="http://schemas.xmlsoap.org/soap/encoding/">` + "\n"

const gsoapTail = "</SOAP-ENV:Body>\n</SOAP-ENV:Envelope>\n"

func fixml(n int, r *rand.Rand) []Message {
	prices := make([]float64, len(asx))
	for i, in := range asx {
		prices[i] = in.price
	}
	now := time.Date(2002, 11, 25, 10, 0, 0, 0, time.UTC).Add(time.Duration(r.IntN(3600)) * time.Second)
	entryID := 68224 + r.IntN(10000)
	seq := 1 + r.IntN(500)
	return pairs(n, func(int) (Message, Message) {
		var b strings.Builder
		b.WriteString(gsoapHead)
		b.WriteString("<ns:sendMessage>\n<FIXMLMessage>\n<Header>\n<Sender><CompID>ASX</CompID></Sender>\n" +
			"<Target><CompID>TMX</CompID></Target>\n")
		// The exchange buffers up to 1 s or 10 entries.
		k := 1 + r.IntN(10)
		fmt.Fprintf(&b, "<SendingTime>%s</SendingTime>\n</Header>\n<ApplicationMessage>\n<MarketDataInc>\n<MDInclList>\n",
			now.Add(time.Second).Format("2006-01-02T15:04:05.000"))
		for range k {
			now = now.Add(time.Duration(r.IntN(200)) * time.Millisecond)
			i := r.IntN(len(asx))
			// Random walk in ticks of half a cent.
			prices[i] = math.Max(0.005, prices[i]+float64(r.IntN(5)-2)*0.005)
			entryID++
			fmt.Fprintf(&b, "<MDIncGroup>\n<MDUpdateAction>0</MDUpdateAction>\n"+
				"<MDEntryID>T%06d</MDEntryID>\n<Instrument>\n<Symbol>%s</Symbol>\n<CFICode>ESXXXX</CFICode>\n</Instrument>\n"+
				"<MDEntryPx>%.2f</MDEntryPx>\n<MDEntrySize>%d</MDEntrySize>\n<MDEntryDate>%s</MDEntryDate>\n"+
				"<MDEntryTime>%s</MDEntryTime>\n<SellerDays>3</SellerDays>\n<MDEntryBuyer>%d</MDEntryBuyer>\n"+
				"<MDEntrySeller>%d</MDEntrySeller>\n</MDIncGroup>\n",
				entryID, asx[i].sym, prices[i], 1+r.IntN(20)*50+r.IntN(50), now.Format("2006-01-02"),
				now.Format("15:04:05.000"), 1000+r.IntN(9000), 1000+r.IntN(9000))
		}
		b.WriteString("</MDInclList>\n</MarketDataInc>\n</ApplicationMessage>\n</FIXMLMessage>\n</ns:sendMessage>\n")
		b.WriteString(gsoapTail)
		resp := fmt.Sprintf("%s<ns:sendMessageResponse><result>%d</result></ns:sendMessageResponse>\n%s", gsoapHead, seq, gsoapTail)
		seq++
		now = now.Add(time.Duration(200+r.IntN(800)) * time.Millisecond)
		return Message{Name: "sendMessage", Body: []byte(b.String())},
			Message{Name: "sendMessageResponse", Body: []byte(resp)}
	})
}
