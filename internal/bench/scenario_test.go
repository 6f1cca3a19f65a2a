package bench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestScenariosLoadDeterministically(t *testing.T) {
	for _, spec := range Scenarios() {
		t.Run(spec.Name, func(t *testing.T) {
			n := 12
			if spec.ApproxResponse > 100_000 { // northwind, the attachments
				n = 2
			}
			a, err := LoadScenario(spec.Name, n, 1)
			require.NoError(t, err)
			require.Len(t, a.Calls, n)
			b, err := LoadScenario(spec.Name, n, 1)
			require.NoError(t, err)
			for i := range a.Calls {
				require.Equal(t, a.Calls[i], b.Calls[i], "call %d differs between two loads", i)
				require.NotEmpty(t, a.Calls[i].Request)
				if spec.OneWay {
					require.Empty(t, a.Calls[i].Response, "a one-way call is answered 202 with no body")
				} else {
					require.NotEmpty(t, a.Calls[i].Response)
				}
			}
			if spec.Entries > 0 {
				for i, c := range a.Calls {
					require.Equal(t, spec.Entries, FixmlEntries(c.Request), "call %d", i)
				}
			}
			// A shorter load is a prefix of a longer one: runs of different lengths
			// share the replay server's calls.
			short, err := LoadScenario(spec.Name, n/2, 1)
			require.NoError(t, err)
			require.Equal(t, a.Calls[:n/2], short.Calls)
		})
	}
}

func TestScenarioSizesMatchThePapers(t *testing.T) {
	for name, want := range map[string][2]int{"stress": {652, 464}, "deploy": {655, 296}} {
		s, err := LoadScenario(name, 5, 7)
		require.NoError(t, err)
		for _, c := range s.Calls {
			require.Len(t, c.Request, want[0], name)
			require.Len(t, c.Response, want[1], name)
		}
	}
	s, err := LoadScenario("northwind", 3, 1)
	require.NoError(t, err)
	for _, c := range s.Calls {
		require.Greater(t, len(c.Response), 100_000)
	}
}

func TestAttachmentScenario(t *testing.T) {
	s, err := LoadScenario("attachment-200k", 3, 1)
	require.NoError(t, err)
	require.Len(t, s.Calls, 3)
	for i, c := range s.Calls {
		require.Equal(t, "GetDocument", c.Name)
		require.InDelta(t, 430, len(c.Request), 50, "call %d", i)
		require.InDelta(t, 200_000, len(c.Response), 10_000, "call %d", i)
		h := s.requestHeaders("10.0.0.2:80", i)
		require.Contains(t, h, [2]string{"SOAPAction", `"http://docs.example.com/DocumentService/GetDocument"`})
		require.Contains(t, h, [2]string{"Content-Type", "text/xml; charset=utf-8"})
		req := appendRequest(nil, "HTTP/1.0", s.spec.Path, h, c.Request)
		require.True(t, bytes.HasPrefix(req, []byte("POST /DocumentService/DocumentService.asmx HTTP/1.0\r\n")))
	}
	require.NotEqual(t, s.Calls[0].Response, s.Calls[1].Response)
}

func TestScenarioErrors(t *testing.T) {
	_, err := LoadScenario("nope", 1, 1)
	require.ErrorContains(t, err, `unknown scenario "nope"`)
	_, err = LoadScenario("stress", 0, 1)
	require.Error(t, err)
}

func TestRequestHeaders(t *testing.T) {
	s, err := LoadScenario("charging", 40, 1)
	require.NoError(t, err)
	soap12 := false
	for i, c := range s.Calls {
		h := s.requestHeaders("10.0.0.2:80", i)
		req := appendRequest(nil, "HTTP/1.0", s.spec.Path, h, c.Request)
		require.True(t, bytes.HasPrefix(req, []byte("POST /axis/servlet/rpcrouter HTTP/1.0\r\n")))
		require.Contains(t, string(req), "\r\nX-Bench-Call: charging/")
		require.True(t, bytes.HasSuffix(req, c.Request))
		if bytes.Contains(c.Request, soap12NS) {
			soap12 = true
			require.Equal(t, "application/soap+xml; charset=utf-8", h[0][1])
		}
	}
	require.True(t, soap12, "the charging mix has SOAP 1.2 alerts in its first 40 calls")
}

// firstBodyElement is the local name of the first element inside the SOAP Body, what
// the soapgw edge's edge.one_way operation matches.
func firstBodyElement(t *testing.T, body []byte) string {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(body))
	inBody := false
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return ""
		}
		require.NoError(t, err)
		if se, ok := tok.(xml.StartElement); ok {
			if inBody {
				return se.Name.Local
			}
			inBody = se.Name.Local == "Body"
		}
	}
}

func TestOneWayScenario(t *testing.T) {
	spec, ok := ScenarioByName("stress-oneway")
	require.True(t, ok)
	require.True(t, spec.OneWay)
	require.Equal(t, "stress", spec.Synchronous)
	require.Equal(t, http.StatusAccepted, spec.wantStatus())
	stressSpec, _ := ScenarioByName("stress")
	require.Equal(t, http.StatusOK, stressSpec.wantStatus())
	// The edge marks the operation under the one-way path only: stress, through the same
	// soapgw configuration, stays synchronous.
	require.False(t, strings.HasPrefix(stressSpec.Path, spec.Path), "stress's path must not match the one-way path_prefix")

	ow, err := LoadScenario("stress-oneway", 20, 5)
	require.NoError(t, err)
	st, err := LoadScenario("stress", 20, 5)
	require.NoError(t, err)
	for i, c := range ow.Calls {
		require.Equal(t, st.Calls[i].Request, c.Request, "call %d: the stress generator's request", i)
		require.Len(t, c.Request, 652)
		require.Nil(t, c.Response)
		require.Equal(t, spec.OneWayOperation, firstBodyElement(t, c.Request), "call %d", i)
		h := ow.requestHeaders("10.0.0.2:80", i)
		require.Contains(t, h, [2]string{"SOAPAction", `""`}, "the Stress requests carry no action: the edge matches the Body's element")
		req := appendRequest(nil, "HTTP/1.0", ow.spec.Path, h, c.Request)
		require.True(t, bytes.HasPrefix(req, []byte("POST /axis/services/CalendarOneWay HTTP/1.0\r\n")))
	}
	req, resp := ow.bytesPerCall()
	require.Equal(t, 652, req)
	require.Zero(t, resp)
}
