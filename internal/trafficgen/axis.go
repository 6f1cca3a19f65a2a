package trafficgen

import (
	"fmt"
	"math/rand/v2"

	"github.com/soapgw/soapgw/internal/soapdemo"
)

// Kangasharju et al. (seed 000): Apache Axis 1.0, Stress and Deploy.

// stress reuses soapdemo's fixed-size Stress envelopes (652/464 bytes),
// starting at a seed-chosen half-hour slot and advancing one slot a call.
func stress(n int, r *rand.Rand) []Message {
	start := r.IntN(soapdemo.StressCalls)
	return pairs(n, func(i int) (Message, Message) {
		return Message{Name: "addEntry", Body: soapdemo.StressRequest(start + i)},
			Message{Name: "addEntryResponse", Body: soapdemo.StressResponse(start + i)}
	})
}

const (
	axisHead = `<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
		`<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"` +
		` xmlns:xsd="http://www.w3.org/2001/XMLSchema"` +
		` xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">` + "\n" +
		" <soapenv:Body>\n"
	axisTail = " </soapenv:Body>\n</soapenv:Envelope>"
	soapEnc  = "http://schemas.xmlsoap.org/soap/encoding/"
)

// Deploy: the paper's client sends a 391-byte Axis deployment descriptor
// in a 655-byte SOAP message and gets a 31-byte document back in 296
// bytes. Field widths are fixed so every call has exactly those sizes.
const (
	DeployRequestSize     = 655
	DeployRequestDocSize  = 391
	DeployResponseSize    = 296
	DeployResponseDocSize = 31
)

var deployServices = []string{"Calendar", "Contacts", "TodoList", "Messages", "Presence", "Location"}

func deployDoc(svc string, ver int) string {
	return fmt.Sprintf(`<deployment xmlns="http://xml.apache.org/axis/wsdd/"`+
		` xmlns:java="http://xml.apache.org/axis/wsdd/providers/java">`+
		`<service name="%s%03d" provider="java:RPC">`+
		`<parameter name="className" value="fi.hiit.%s.Svc%03d"/>`+
		`<parameter name="allowedMethods" value="*"/>`+
		`<parameter name="scope" value="Application"/>`+
		`<parameter name="wsdlTargetNamespace" value="urn:Fuego"/>`+
		`</service></deployment>`, svc, ver, svc, ver)
}

const deployRespDoc = `<Admin>Done processing</Admin>` + "\n" // 31 bytes

// deploy sends the deployment descriptor of a different service each
// call, document style, as Axis 1.0's AdminClient did.
func deploy(n int, r *rand.Rand) []Message {
	ver := r.IntN(900)
	return pairs(n, func(i int) (Message, Message) {
		svc := deployServices[(i+ver)%len(deployServices)]
		doc := deployDoc(svc, (ver+i)%1000)
		return Message{Name: "deployment", Body: []byte(deployHead + doc + deployTail)},
			Message{Name: "AdminResponse", Body: []byte(deployHead + deployRespDoc + deployTail + "\n")}
	})
}

const (
	deployHead = `<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
		`<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"` +
		` xmlns:xsd="http://www.w3.org/2001/XMLSchema"` +
		` xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">` + "\n" +
		"<soapenv:Body>"
	deployTail = "</soapenv:Body>\n</soapenv:Envelope>"
)
