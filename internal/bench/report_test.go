package bench

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func sampleResults() *Results {
	wlan := Profile{Name: "wlan", Description: "802.11b <ad hoc> & co", Up: Shape{Delay: 1250 * time.Microsecond, Loss: 0.005}, Down: Shape{Delay: 1250 * time.Microsecond}}
	r := &Results{
		Machine:     Machine{CPUModel: "Test CPU", Cores: 2, Kernel: "6.1", GoVersion: "go1.26", SoapgwVersion: "dev"},
		CommandLine: "soapgw bench --profiles wlan",
		Started:     time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Profiles:    []Profile{{Name: LoopbackProfile}, wlan},
		Notes:       []string{"a note"},
	}
	for _, s := range []string{"stress", "northwind"} {
		spec, _ := ScenarioByName(s)
		r.Scenarios = append(r.Scenarios, spec)
	}
	mk := func(profile, scen string, c int, cfg string, p50 float64, bytes float64) RunResult {
		x := RunResult{Profile: profile, Scenario: scen, Concurrency: c, Config: cfg, Status: StatusOK, Planned: 10, Started: 10, OK: 10,
			Latency: Latency{N: 10, Min: p50 / 2, Mean: p50, P50: p50, P90: p50 * 1.5, P99: p50 * 3, Max: p50 * 4}, TotalMS: p50 * 10, CallsPerSec: 1000 / p50,
			RequestBytes: 652, ResponseBytes: 464}
		if profile != LoopbackProfile {
			x.PerExchange = &PerExchange{PureTCPBytes: bytes * 0.2, TCPDataBytes: bytes * 0.8, TotalBytes: bytes, Packets: 10}
			x.Link = &LinkStats{}
		}
		if cfg != "direct" {
			x.Procs = []ProcResult{{Name: "edge", CPUS: 0.01, PeakRSS: 20 << 20, PeakInRun: true}}
		}
		return x
	}
	for _, p := range []string{LoopbackProfile, "wlan"} {
		for _, s := range []string{"stress", "northwind"} {
			for _, c := range []int{1, 16} {
				r.Runs = append(r.Runs, mk(p, s, c, "direct", 5, 2100), mk(p, s, c, "soapgw/identity", 2.5, 1600))
				skip := RunResult{Profile: p, Scenario: s, Concurrency: c, Config: "soapgw/token", Status: StatusSkipped, Reason: "codec \"token\" | not implemented"}
				r.Runs = append(r.Runs, skip)
			}
		}
		r.Configs = append(r.Configs,
			ConfigInfo{Name: "direct", Profile: p, Status: StatusOK},
			ConfigInfo{Name: "soapgw/identity", Profile: p, Status: StatusOK, Notes: []string{"soapgw dev"}},
			ConfigInfo{Name: "soapgw/token", Profile: p, Status: StatusSkipped, Reason: "codec \"token\" | not implemented"})
	}
	r.Runs[0].Status, r.Runs[0].Mismatches, r.Runs[0].Reason = StatusFailed, 1, "1 errors, 1 mismatches of 10 calls"
	return r
}

// wellFormed parses an SVG completely and returns its root element's name.
func wellFormed(t *testing.T, svg []byte) string {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(string(svg)))
	root := ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Space + " " + se.Name.Local
		}
	}
	return root
}

func TestWriteResults(t *testing.T) {
	dir := t.TempDir()
	r := sampleResults()
	files, err := WriteResults(dir, r)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"results.json", "report.md",
		"latency-loopback-c1.svg", "latency-loopback-c16.svg", "latency-wlan-c1.svg", "latency-wlan-c16.svg", "bytes-wlan.svg"}, files)

	back, err := ReadResults(filepath.Join(dir, "results.json"))
	require.NoError(t, err)
	require.Equal(t, r.Runs, back.Runs)
	require.Equal(t, r.Machine, back.Machine)

	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	require.NoError(t, err)
	s := string(md)
	for _, want := range []string{
		"# soapgw benchmark",
		"## FAILED",
		"loopback stress c=1 direct: 1 errors, 1 mismatches",
		"### wlan / stress / 1 client (sequential",
		"### wlan / northwind / 16 concurrent clients",
		"### loopback / stress / 1 client",
		"| configuration | status | calls | p50 ms |",
		"| soapgw/identity | ok | 10 | 2.50 | 3.75 | 7.50 | 10.0 |",
		"| 320 | 1280 | 0 | 1600 | 10.0 | 76% | 0.50x | 1.000 | 20.0 |", // wlan: bytes vs direct, CPU ms/call, RSS
		"| n/a | n/a | n/a | n/a | n/a |",                               // loopback has no packet counts
		`codec "token" \| not implemented`,                              // pipes escaped in cells
		"![wlan: IP bytes on the link per exchange",
		"(bytes-wlan.svg)",
		"| stress | FAILED | 2.50 | skipped |", // overview, loopback c=1
		"| stress | 5.00 (2100) | 2.50 (1600) | skipped |",
		"## Summary across profiles",
		"### northwind, 16 concurrent clients (HTTP/1.0, connection per call): p50 ms (IP bytes per exchange)",
		"| wlan | 5.00 (2100) | 2.50 (1600) | skipped |",
	} {
		require.Contains(t, s, want)
	}
	// Every table row has as many cells as its header.
	var cols int
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(line, "|") {
			cols = 0
			continue
		}
		n := strings.Count(strings.ReplaceAll(line, `\|`, ""), "|")
		if cols == 0 {
			cols = n
		}
		require.Equal(t, cols, n, "row %q", line)
	}

	for _, f := range files {
		if !strings.HasSuffix(f, ".svg") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		require.Equal(t, "http://www.w3.org/2000/svg svg", wellFormed(t, b), f)
		require.Contains(t, string(b), "<title>")
		require.Contains(t, string(b), "stress")
	}
	lat, _ := os.ReadFile(filepath.Join(dir, "latency-wlan-c1.svg"))
	require.Contains(t, string(lat), "p50 2.50, p99 7.50 ms")
	require.Contains(t, string(lat), "skipped")
	by, _ := os.ReadFile(filepath.Join(dir, "bytes-wlan.svg"))
	require.Contains(t, string(by), "1600 B, 10.0 packets")
	require.Contains(t, string(by), "pure TCP (SYN/FIN/ACK)")
}

func TestSVGEscapesText(t *testing.T) {
	svg := drawPanels(`a <b> & "c"`, []panel{{title: "x<y", unit: "ms", bars: []bar{{label: "p&q", segments: []float64{1}, whisker: 2, text: "<1>"}}}}, []string{"p&q"}, nil)
	wellFormed(t, svg)
	require.Contains(t, string(svg), "a &lt;b&gt; &amp;")
}

func TestNiceCeil(t *testing.T) {
	for in, want := range map[float64]float64{0.7: 1, 1: 1, 1.01: 2, 2.4: 5, 7: 10, 1234: 2000, 0: 1, 0.003: 0.005} {
		require.InDelta(t, want, niceCeil(in), want*1e-9, "niceCeil(%v)", in)
	}
}

// TestWriteOneWayReport: a one-way scenario gets a delivery table per profile, a
// one-way summary beside its synchronous twin with the goals, and a delivery chart.
func TestWriteOneWayReport(t *testing.T) {
	gprs := Profile{Name: "gprs", Up: Shape{Delay: 410 * time.Millisecond, RateBps: 40_000}, Down: Shape{Delay: 410 * time.Millisecond, RateBps: 40_000}}
	r := &Results{CommandLine: "soapgw bench --scenarios stress,stress-oneway", Profiles: []Profile{gprs}}
	for _, s := range []string{"stress", "stress-oneway"} {
		spec, _ := ScenarioByName(s)
		r.Scenarios = append(r.Scenarios, spec)
	}
	mk := func(scen, cfg string, p50, p99, perSec, up, down float64) RunResult {
		e := &PerExchange{UpBytes: up, DownBytes: down, UpCarried: up, DownCarried: down, TotalBytes: up + down, Packets: 3}
		allow := linkAllows(gprs, e)
		return RunResult{Profile: "gprs", Scenario: scen, Concurrency: 1, Config: cfg, Status: StatusOK, Planned: 100, Started: 100, OK: 100,
			Latency: Latency{N: 100, P50: p50, P90: p50, P99: p99, Max: p99}, TotalMS: 100 * p50, CallsPerSec: 1000 / p50,
			RequestBytes: 652, PerExchange: e, Link: &LinkStats{},
			Delivery: &Delivery{Messages: 100, MS: 100_000 / perSec, PerSec: perSec, AfterClientMS: 1500, LinkAllowsPerSec: allow, LinkRatio: perSec / allow}}
	}
	r.Runs = []RunResult{
		mk("stress", "nginx-pair", 1129, 3931, 0.9, 1000, 730),
		mk("stress", "soapgw/auto", 861, 2668, 1.2, 100, 69),
		mk("stress-oneway", "nginx-pair", 1100, 3900, 0.9, 1000, 300),
		mk("stress-oneway", "soapgw/auto", 1.5, 2.6, 50, 90, 20), // link allows 5000/90 = 55.6 msg/s: 90 %
		{Profile: "gprs", Scenario: "stress-oneway", Concurrency: 1, Config: "soapgw/token", Status: StatusFailed, Started: 3, OK: 3,
			Reason: "1 of 3 acknowledged calls did not reach the server", Delivery: &Delivery{Messages: 2}},
	}
	dir := t.TempDir()
	files, err := WriteResults(dir, r)
	require.NoError(t, err)
	require.Contains(t, files, "delivery-gprs-c1.svg")

	back, err := ReadResults(filepath.Join(dir, "results.json"))
	require.NoError(t, err)
	require.Equal(t, r.Runs, back.Runs)
	require.True(t, back.Scenarios[1].OneWay)
	raw, err := os.ReadFile(filepath.Join(dir, "results.json"))
	require.NoError(t, err)
	for _, key := range []string{`"delivery"`, `"messages_per_s"`, `"link_allows_per_s"`, `"link_ratio"`, `"after_client_ms"`, `"one_way": true`} {
		require.Contains(t, string(raw), key)
	}

	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	require.NoError(t, err)
	s := string(md)
	for _, want := range []string{
		"## One-way messaging",
		"client latency ≤ 2 ms on every profile",
		"### stress-oneway, 1 client",
		"| profile | configuration | client p50 / p99 ms | ≤ 2 ms | client calls/s | msgs/s delivered | IP B/msg | link allows msgs/s | delivered / allowed | stress: p50 / p99 ms | stress: calls/s |",
		"| gprs | soapgw/auto | 1.50 / 2.60 | p50 only | 666.7 | 50.0 | 110 | 55.6 | 90% | 861 / 2668 | 1.2 |",
		"| gprs | nginx-pair | 1100 / 3900 | no | 0.9 | 0.9 | 1300 | 5.0 | 18% | 1129 / 3931 | 0.9 |",
		"| gprs | soapgw/token | FAILED | | | | | | | | |",
		"Delivery: the measured calls as the server received them",
		"| soapgw/auto | ok | 100 | 100 | 0 | 1.50 | 2.60 | 2.00 | 1.50 | 50.0 | 90 | 20 | 110 | 55.6 | 90% |",
		"![gprs: messages per second delivered to the server",
	} {
		require.Contains(t, s, want)
	}
	require.Equal(t, 1, strings.Count(s, "Delivery: the measured calls"), "only the one-way scenario's table")
	var cols int
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(line, "|") {
			cols = 0
			continue
		}
		n := strings.Count(line, "|")
		if cols == 0 {
			cols = n
		}
		require.Equal(t, cols, n, "row %q", line)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "delivery-gprs-c1.svg"))
	require.NoError(t, err)
	wellFormed(t, svg)
	require.Contains(t, string(svg), "50.0 msg/s, 90% of link")
	require.Contains(t, string(svg), "stress, delivered to the server", "the synchronous twin beside it")
}
