package bench

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"

	"github.com/soapgw/soapgw/internal/trafficgen"
)

// Call is one request/response exchange of a scenario: the bytes the client sends and
// the bytes the replay server answers, both checked byte for byte at the far end.
type Call struct {
	Name     string // operation, e.g. "addEntry"
	Request  []byte
	Response []byte
}

// Scenario is a named, deterministic sequence of exchanges from internal/trafficgen.
type Scenario struct {
	Name  string
	Calls []Call
	spec  ScenarioSpec
}

// Spec describes the scenario.
func (s *Scenario) Spec() ScenarioSpec { return s.spec }

// ScenarioSpec describes how to build a scenario and how its client talks.
type ScenarioSpec struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Source      string `json:"source"` // the paper (seed) it models
	Family      string `json:"family"` // the internal/trafficgen family
	// Entries filters fixml messages by their number of MDIncGroup entries (0: all).
	Entries int `json:"entries,omitempty"`
	// Path is the request target; UserAgent and SOAPAction the client's headers.
	Path       string              `json:"path"`
	UserAgent  string              `json:"user_agent"`
	SOAPAction func(c Call) string `json:"-"`
	// MaxCalls bounds the calls a run makes by default (big messages: fewer).
	MaxCalls int `json:"max_calls"`
	// OneWay makes every call a one-way operation: the server answers 202 Accepted with
	// an empty body, and a gateway that knows one-way messaging may acknowledge the call
	// itself and deliver it later (the soapgw configurations mark OneWayOperation under
	// Path as edge.one_way). The report adds the time until the server had every message.
	OneWay bool `json:"one_way,omitempty"`
	// OneWayOperation is the local name of the first element in the requests' SOAP
	// Body, which the soapgw edge matches (the Stress requests' SOAPAction is empty).
	OneWayOperation string `json:"one_way_operation,omitempty"`
	// Synchronous names the scenario with the same requests answered synchronously, for
	// the report's side-by-side table.
	Synchronous string `json:"synchronous,omitempty"`
	// ApproxRequest, ApproxResponse are typical sizes in bytes, for planning only.
	ApproxRequest, ApproxResponse int `json:"-"`
}

func emptyAction(Call) string { return `""` }

// Scenarios lists every scenario, in report order.
func Scenarios() []ScenarioSpec {
	axis := "Axis/1.0"
	return []ScenarioSpec{
		{Name: "deploy", Family: "deploy", Source: "seed 000 (Kangasharju et al.), Table 4",
			Description: "Axis 1.0 AdminClient deployment: 655-byte request, 296-byte response",
			Path:        "/axis/services/AdminService", UserAgent: axis, SOAPAction: emptyAction, MaxCalls: 200,
			ApproxRequest: 655, ApproxResponse: 296},
		{Name: "stress", Family: "stress", Source: "seed 000 (Kangasharju et al.), Tables 5-7",
			Description: "Axis 1.0 calendar addEntry: 652-byte request, 464-byte response (the paper runs 17472 calls)",
			Path:        "/axis/services/Calendar", UserAgent: axis, SOAPAction: emptyAction, MaxCalls: 17472,
			ApproxRequest: 652, ApproxResponse: 464},
		{Name: "stress-oneway", Family: "stress", Source: "seed 000 (Kangasharju et al.), Tables 5-7, Pera",
			Description: "the Stress addEntry requests (652 bytes) as a one-way operation: the server answers 202 Accepted with an empty body",
			Path:        oneWayCalendarPath, UserAgent: axis, SOAPAction: emptyAction, MaxCalls: 17472,
			OneWay: true, OneWayOperation: "addEntry", Synchronous: "stress",
			ApproxRequest: 652, ApproxResponse: 0},
		{Name: "weather-simple", Family: "weather-simple", Source: "seed 004 (Lai, Phan, Tari), Figs 3-5",
			Description: "Axis 1.2 RPC/encoded weather service, float temperature (multiRef)",
			Path:        "/axis/services/Weather", UserAgent: "Axis/1.2RC3", SOAPAction: emptyAction, MaxCalls: 1000,
			ApproxRequest: 440, ApproxResponse: 640},
		{Name: "weather-detailed", Family: "weather-detailed", Source: "seed 004 (Lai, Phan, Tari), Figs 6-8",
			Description: "Axis 1.2 RPC/encoded weather service, detailed textual report spanning several segments",
			Path:        "/axis/services/Weather", UserAgent: "Axis/1.2RC3", SOAPAction: emptyAction, MaxCalls: 1000,
			ApproxRequest: 440, ApproxResponse: 2000},
		{Name: "fixml-1", Family: "fixml", Entries: 1, Source: "seed 001 (Kohlhoff, Steele), Tables 1-2",
			Description: "gSOAP FIXML market-data incremental refresh with 1 entry",
			Path:        "/fixml", UserAgent: "gSOAP/2.2", SOAPAction: emptyAction, MaxCalls: 1000,
			ApproxRequest: 1030, ApproxResponse: 500},
		{Name: "fixml-5", Family: "fixml", Entries: 5, Source: "seed 001 (Kohlhoff, Steele), Tables 1-2",
			Description: "gSOAP FIXML market-data incremental refresh with 5 entries",
			Path:        "/fixml", UserAgent: "gSOAP/2.2", SOAPAction: emptyAction, MaxCalls: 1000,
			ApproxRequest: 2570, ApproxResponse: 500},
		{Name: "fixml-10", Family: "fixml", Entries: 10, Source: "seed 001 (Kohlhoff, Steele), Tables 1-2",
			Description: "gSOAP FIXML market-data incremental refresh with 10 entries",
			Path:        "/fixml", UserAgent: "gSOAP/2.2", SOAPAction: emptyAction, MaxCalls: 1000,
			ApproxRequest: 4500, ApproxResponse: 500},
		{Name: "northwind", Family: "northwind", Source: "seed 002 (Tere et al.), Table I",
			Description: "ASP.NET getorders returning the Northwind Orders DataSet, 300-830 rows (150-450 KB)",
			Path:        "/NorthwindService/Service.asmx", UserAgent: "Mozilla/4.0 (compatible; MSIE 6.0; MS Web Services Client Protocol 1.1.4322.2032)",
			SOAPAction: func(Call) string { return `"http://tempuri.org/getorders"` }, MaxCalls: 40,
			ApproxRequest: 300, ApproxResponse: 310_000},
		{Name: "charging", Family: "charging", Source: "seed 003 (Elfwing, Paulsson)",
			Description: "Axis beta 1 mobile charging mix (credit, debit, reservations, confirms, SOAP 1.2 alerts)",
			Path:        "/axis/servlet/rpcrouter", UserAgent: "Axis/beta1",
			SOAPAction: func(c Call) string { return `"urn:Charging#` + c.Name + `"` }, MaxCalls: 1000,
			ApproxRequest: 520, ApproxResponse: 480},
		{Name: "attachment-200k", Family: "attachment-200k", Source: attachmentSource,
			Description: "ASP.NET GetDocument: 430-byte request, 190-210 KB response, a binary attachment (PDF, JPEG, TIFF, DOCX) inline as xsd:base64Binary",
			Path:        documentPath, UserAgent: dotnet20, SOAPAction: getDocumentAction, MaxCalls: 64,
			ApproxRequest: 430, ApproxResponse: 200_000},
		{Name: "attachment-2m", Family: "attachment-2m", Source: attachmentSource,
			Description: "ASP.NET GetDocument: 430-byte request, 1.9-2.1 MB response, a binary attachment (PDF, JPEG, TIFF, DOCX) inline as xsd:base64Binary",
			Path:        documentPath, UserAgent: dotnet20, SOAPAction: getDocumentAction, MaxCalls: 16,
			ApproxRequest: 430, ApproxResponse: 2_000_000},
		{Name: "northwind-3m", Family: "northwind-3m", Source: `issue 19, "messages over 1 MiB travel uncoded"`,
			Description: "ASP.NET getorders returning 4,100-6,500 rows of the Northwind Orders DataSet (2.2-3.5 MB: above codecs.max_coded_message)",
			Path:        "/NorthwindService/Service.asmx", UserAgent: "Mozilla/4.0 (compatible; MSIE 6.0; MS Web Services Client Protocol 1.1.4322.2032)",
			SOAPAction: func(Call) string { return `"http://tempuri.org/getorders"` }, MaxCalls: 16,
			ApproxRequest: 300, ApproxResponse: 2_850_000},
	}
}

// oneWayCalendarPath is the one-way calendar's endpoint. It differs from stress's
// /axis/services/Calendar (which is not a prefix of it the other way round) so that the
// soapgw edge marks only stress-oneway's addEntry one-way (edge.one_way path_prefix) and
// stress stays synchronous through the same configuration.
const oneWayCalendarPath = "/axis/services/CalendarOneWay"

// The attachment scenarios' document service, called by a .NET 2.0 client.
const (
	attachmentSource = `issue 17, "200 KB and 2 MB incompressible messages"`
	documentPath     = "/DocumentService/DocumentService.asmx"
	dotnet20         = "Mozilla/4.0 (compatible; MSIE 6.0; MS Web Services Client Protocol 2.0.50727.3603)"
)

func getDocumentAction(Call) string { return `"http://docs.example.com/DocumentService/GetDocument"` }

// ScenarioNames lists the names of Scenarios.
func ScenarioNames() []string {
	var out []string
	for _, s := range Scenarios() {
		out = append(out, s.Name)
	}
	return out
}

// ScenarioByName finds a scenario spec.
func ScenarioByName(name string) (ScenarioSpec, bool) {
	for _, s := range Scenarios() {
		if s.Name == name {
			return s, true
		}
	}
	return ScenarioSpec{}, false
}

// maxGenAttempts bounds how often LoadScenario regenerates a family to find enough
// fixml messages with the wanted number of entries.
const maxGenAttempts = 6

// LoadScenario generates n exchanges of the named scenario for the seed.
func LoadScenario(name string, n int, seed int64) (*Scenario, error) {
	spec, ok := ScenarioByName(name)
	if !ok {
		return nil, fmt.Errorf("unknown scenario %q (known: %v)", name, ScenarioNames())
	}
	if n < 1 {
		return nil, fmt.Errorf("scenario %s: %d calls", name, n)
	}
	want := 2 * n
	if spec.Entries > 0 {
		want = 2 * (n*12 + 20) // entries are uniform in 1..10
	}
	for attempt := 0; attempt < maxGenAttempts; attempt, want = attempt+1, want*2 {
		msgs := trafficgen.Family(spec.Family, want, seed)
		calls, err := pairCalls(msgs, spec.Entries)
		if err != nil {
			return nil, fmt.Errorf("scenario %s: %w", name, err)
		}
		if len(calls) >= n {
			calls = calls[:n]
			if spec.OneWay {
				for i := range calls {
					calls[i].Response = nil // 202 Accepted, no body
				}
			}
			return &Scenario{Name: name, Calls: calls, spec: spec}, nil
		}
		if spec.Entries == 0 {
			break
		}
	}
	return nil, fmt.Errorf("scenario %s: internal/trafficgen gave fewer than %d exchanges", name, n)
}

// pairCalls turns gen's request/response sequence into calls, keeping only fixml
// requests with the given number of entries when entries > 0.
func pairCalls(msgs []trafficgen.Message, entries int) ([]Call, error) {
	var calls []Call
	for i := 0; i+1 < len(msgs); i += 2 {
		q, p := msgs[i], msgs[i+1]
		if q.Dir != trafficgen.Request || p.Dir != trafficgen.Response {
			return nil, fmt.Errorf("message %d: want a request then a response, got %s, %s", i, q.Dir, p.Dir)
		}
		if entries > 0 && FixmlEntries(q.Body) != entries {
			continue
		}
		calls = append(calls, Call{Name: q.Name, Request: q.Body, Response: p.Body})
	}
	return calls, nil
}

// FixmlEntries counts the market-data entries of a FIXML request.
func FixmlEntries(body []byte) int { return bytes.Count(body, []byte("<MDIncGroup>")) }

// soap12NS marks a SOAP 1.2 envelope, which travels as application/soap+xml.
var soap12NS = []byte("http://www.w3.org/2003/05/soap-envelope")

// contentType is the media type of a SOAP message body.
func contentType(body []byte) string {
	if bytes.Contains(body, soap12NS) {
		return "application/soap+xml; charset=utf-8"
	}
	return "text/xml; charset=utf-8"
}

// CallHeader names the request header that tells the replay server which exchange a
// request is: "<scenario>/<index>". Gateways forward it unchanged; it adds the same
// bytes to every configuration.
const CallHeader = "X-Bench-Call"

// requestHeaders are the fields the client sends for call i, in order, as the legacy
// stack of the scenario would (plus CallHeader).
func (s *Scenario) requestHeaders(host string, i int) [][2]string {
	c := s.Calls[i]
	h := [][2]string{
		{"Content-Type", contentType(c.Request)},
		{"Accept", "application/soap+xml, application/dime, multipart/related, text/*"},
		{"User-Agent", s.spec.UserAgent},
		{"Host", host},
		{"Cache-Control", "no-cache"},
		{"Pragma", "no-cache"},
		{"SOAPAction", s.spec.SOAPAction(c)},
		{"Content-Length", strconv.Itoa(len(c.Request))},
		{CallHeader, s.Name + "/" + strconv.Itoa(i)},
	}
	return h
}

// wantStatus is the status of the server's answer to every call of the scenario.
func (spec ScenarioSpec) wantStatus() int {
	if spec.OneWay {
		return http.StatusAccepted
	}
	return http.StatusOK
}

// bytesPerCall returns the mean request and response body sizes.
func (s *Scenario) bytesPerCall() (req, resp int) {
	if len(s.Calls) == 0 {
		return 0, 0
	}
	for _, c := range s.Calls {
		req += len(c.Request)
		resp += len(c.Response)
	}
	return req / len(s.Calls), resp / len(s.Calls)
}
