package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// WriteResults writes results.json, report.md and the SVG charts into dir.
func WriteResults(dir string, r *Results) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(j, '\n'), 0o644); err != nil {
		return nil, err
	}
	files = append(files, "results.json")
	charts := Charts(r)
	for _, c := range charts {
		if err := os.WriteFile(filepath.Join(dir, c.File), c.SVG, 0o644); err != nil {
			return nil, err
		}
		files = append(files, c.File)
	}
	f, err := os.Create(filepath.Join(dir, "report.md"))
	if err != nil {
		return nil, err
	}
	if err := WriteMarkdown(f, r, charts); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return append(files, "report.md"), nil
}

// ReadResults reads a results.json.
func ReadResults(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// configOrder lists the configurations in the order they ran.
func configOrder(r *Results) []string {
	var out []string
	for _, x := range r.Runs {
		if !slices.Contains(out, x.Config) {
			out = append(out, x.Config)
		}
	}
	return out
}

func modesOf(r *Results, profile string) []int {
	var out []int
	for _, x := range r.Runs {
		if x.Profile == profile && !slices.Contains(out, x.Concurrency) {
			out = append(out, x.Concurrency)
		}
	}
	slices.Sort(out)
	return out
}

func scenariosOf(r *Results, profile string) []string {
	var out []string
	for _, x := range r.Runs {
		if x.Profile == profile && !slices.Contains(out, x.Scenario) {
			out = append(out, x.Scenario)
		}
	}
	return out
}

func (r *Results) find(profile, scenario string, c int, config string) (RunResult, bool) {
	for _, x := range r.Runs {
		if x.Profile == profile && x.Scenario == scenario && x.Concurrency == c && x.Config == config {
			return x, true
		}
	}
	return RunResult{}, false
}

func modeName(c int) string {
	if c == 1 {
		return "1 client (sequential, HTTP/1.0, connection per call)"
	}
	return fmt.Sprintf("%d concurrent clients (HTTP/1.0, connection per call)", c)
}

// mdCell escapes a table cell.
func mdCell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	s = strings.ReplaceAll(s, "\n", " ")
	return s
}

func short(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func ms(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// secs formats seconds with three significant digits below 10 s.
func secs(v float64) string {
	if v < 1 && v > 0 {
		return fmt.Sprintf("%.3f", v)
	}
	return ms(v)
}

func bytesCell(v float64) string { return fmt.Sprintf("%.0f", v) }

// WriteMarkdown writes report.md.
func WriteMarkdown(w io.Writer, r *Results, charts []Chart) error {
	b := &strings.Builder{}
	m := r.Machine
	fmt.Fprintf(b, "# soapgw benchmark\n\n")
	fmt.Fprintf(b, "- date: %s (took %.0f s)\n", r.Started.Format("2006-01-02 15:04 UTC"), r.DurationS)
	fmt.Fprintf(b, "- machine: %s, %d cores, %s, kernel %s\n", m.CPUModel, m.Cores, m.OS, m.Kernel)
	fmt.Fprintf(b, "- software: soapgw %s, %s", m.SoapgwVersion, m.GoVersion)
	if m.NginxVersion != "" {
		fmt.Fprintf(b, ", %s", m.NginxVersion)
	}
	fmt.Fprintf(b, "\n- command: `%s`\n- traffic: testdata/gen, seed %d\n\n", r.CommandLine, r.Seed)

	if fails := r.Failures(); len(fails) > 0 {
		fmt.Fprintf(b, "## FAILED\n\n")
		for _, f := range fails {
			fmt.Fprintf(b, "- %s\n", mdCell(short(f, 400)))
		}
		b.WriteString("\n")
	}

	b.WriteString("## How it was measured\n\n")
	b.WriteString("- The client is a legacy SOAP stack: HTTP/1.0, one TCP connection per call, the whole request in one write; it reads the response to its end and checks it byte for byte against the generated response. The server is a replay server that checks each request byte for byte and answers the generated response. Any difference is a mismatch and the run is FAILED.\n")
	for _, n := range r.Notes {
		fmt.Fprintf(b, "- %s\n", n)
	}
	b.WriteString("- Latency is per call, from the client's connect to the last byte of the response; percentiles are nearest-rank. calls/s = successful calls / total time.\n\n")

	b.WriteString("## Profiles\n\n| profile | link | description |\n|---|---|---|\n")
	for _, p := range r.Profiles {
		fmt.Fprintf(b, "| %s | %s | %s |\n", p.Name, mdCell(p.Summary()), mdCell(p.Description))
	}
	b.WriteString("\n## Scenarios\n\n| scenario | source | description |\n|---|---|---|\n")
	for _, s := range r.Scenarios {
		fmt.Fprintf(b, "| %s | %s | %s |\n", s.Name, mdCell(s.Source), mdCell(s.Description))
	}
	b.WriteString("\n## Configurations\n\n| configuration | profile | status | description |\n|---|---|---|---|\n")
	for _, c := range r.Configs {
		st := c.Status
		if c.Reason != "" {
			st += ": " + short(c.Reason, 300)
		}
		desc := c.Description
		if len(c.Notes) > 0 {
			desc += " (" + strings.Join(c.Notes, "; ") + ")"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", c.Name, c.Profile, mdCell(st), mdCell(desc))
	}
	b.WriteString("\n")

	configs := configOrder(r)
	writeSummary(b, r, configs)
	writeOneWay(b, r, configs)
	for _, p := range r.Profiles {
		scens := scenariosOf(r, p.Name)
		if len(scens) == 0 {
			continue
		}
		fmt.Fprintf(b, "## %s (%s)\n\n", p.Name, mdCell(p.Summary()))
		for _, c := range charts {
			if c.Profile == p.Name {
				fmt.Fprintf(b, "![%s](%s)\n\n", c.Title, c.File)
			}
		}
		for _, mode := range modesOf(r, p.Name) {
			// Overview: p50 by scenario × configuration.
			fmt.Fprintf(b, "### Overview, %s: p50 latency ms (bytes per exchange)\n\n| scenario |", modeName(mode))
			for _, c := range configs {
				fmt.Fprintf(b, " %s |", c)
			}
			b.WriteString("\n|---|" + strings.Repeat("---:|", len(configs)) + "\n")
			for _, s := range scens {
				fmt.Fprintf(b, "| %s |", s)
				for _, c := range configs {
					fmt.Fprintf(b, " %s |", overviewCell(r.find(p.Name, s, mode, c)))
				}
				b.WriteString("\n")
			}
			b.WriteString("\n")
			for _, s := range scens {
				writeRunTable(b, r, p.Name, s, mode, configs)
				if spec, ok := r.scenario(s); ok && spec.OneWay {
					writeDeliveryTable(b, r, p.Name, s, mode, configs)
				}
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeRunTable(b *strings.Builder, r *Results, profile, scenario string, mode int, configs []string) {
	var rows []RunResult
	for _, c := range configs {
		if x, ok := r.find(profile, scenario, mode, c); ok {
			rows = append(rows, x)
		}
	}
	if len(rows) == 0 {
		return
	}
	var direct *RunResult
	for i := range rows {
		if rows[i].Config == "direct" && rows[i].Status == StatusOK {
			direct = &rows[i]
		}
	}
	req, resp := 0, 0
	for _, x := range rows {
		if x.RequestBytes > 0 {
			req, resp = x.RequestBytes, x.ResponseBytes
		}
	}
	fmt.Fprintf(b, "### %s / %s / %s\n\n", profile, scenario, modeName(mode))
	if req > 0 {
		fmt.Fprintf(b, "Mean SOAP body: request %d B, response %d B.\n\n", req, resp)
	}
	b.WriteString("| configuration | status | calls | p50 ms | p90 ms | p99 ms | max ms | total s | calls/s | pure TCP B/exch | TCP data B/exch | UDP B/exch | total B/exch | packets/exch | bytes vs direct | p50 vs direct | CPU ms/call | peak RSS MiB |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range rows {
		if x.Status == StatusSkipped || (x.Status == StatusFailed && x.Started == 0) {
			fmt.Fprintf(b, "| %s | %s: %s |%s\n", x.Config, x.Status, mdCell(short(x.Reason, 200)), strings.Repeat(" |", 16))
			continue
		}
		status := x.Status
		if x.Status == StatusFailed {
			status += ": " + mdCell(short(x.Reason, 200))
		} else if x.Truncated {
			status += " (truncated)"
		}
		na := "n/a"
		pure, data, udp, total, pkts, vsBytes := na, na, na, na, na, ""
		if e := x.PerExchange; e != nil {
			pure, data, udp, total = bytesCell(e.PureTCPBytes), bytesCell(e.TCPDataBytes), bytesCell(e.UDPBytes), bytesCell(e.TotalBytes)
			pkts = fmt.Sprintf("%.1f", e.Packets)
			if direct != nil && direct.PerExchange != nil && direct.PerExchange.TotalBytes > 0 {
				vsBytes = fmt.Sprintf("%.0f%%", 100*e.TotalBytes/direct.PerExchange.TotalBytes)
			}
		}
		vsP50 := ""
		if direct != nil && direct.Latency.P50 > 0 && x.Latency.N > 0 {
			vsP50 = fmt.Sprintf("%.2fx", x.Latency.P50/direct.Latency.P50)
		}
		cpu, rss := "", ""
		if len(x.Procs) > 0 {
			if x.OK > 0 {
				cpu = fmt.Sprintf("%.3f", 1000*x.CPUSeconds()/float64(x.Started))
			}
			rss = fmt.Sprintf("%.1f", float64(x.PeakRSS())/(1<<20))
		}
		fmt.Fprintf(b, "| %s | %s | %d | %s | %s | %s | %s | %.2f | %.1f | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			x.Config, status, x.OK, ms(x.Latency.P50), ms(x.Latency.P90), ms(x.Latency.P99), ms(x.Latency.Max),
			x.TotalMS/1000, x.CallsPerSec, pure, data, udp, total, pkts, vsBytes, vsP50, cpu, rss)
	}
	b.WriteString("\n")
}

// writeSummary is one table per scenario and concurrency across profiles (as the
// papers' Tables 6 and 7 do for Stress): p50 and bytes per exchange by configuration.
// Only scenarios that ran on more than one profile get one.
func writeSummary(b *strings.Builder, r *Results, configs []string) {
	type key struct {
		scen string
		c    int
	}
	var keys []key
	profilesOf := map[key][]string{}
	for _, x := range r.Runs {
		k := key{x.Scenario, x.Concurrency}
		if _, ok := profilesOf[k]; !ok {
			keys = append(keys, k)
		}
		if !slices.Contains(profilesOf[k], x.Profile) {
			profilesOf[k] = append(profilesOf[k], x.Profile)
		}
	}
	slices.SortStableFunc(keys, func(a, b key) int { return a.c - b.c })
	header := false
	for _, k := range keys {
		ps := profilesOf[k]
		if len(ps) < 2 {
			continue
		}
		if !header {
			b.WriteString("## Summary across profiles\n\n")
			header = true
		}
		fmt.Fprintf(b, "### %s, %s: p50 ms (IP bytes per exchange)\n\n| profile |", k.scen, modeName(k.c))
		for _, c := range configs {
			fmt.Fprintf(b, " %s |", c)
		}
		b.WriteString("\n|---|" + strings.Repeat("---:|", len(configs)) + "\n")
		for _, p := range ps {
			fmt.Fprintf(b, "| %s |", p)
			for _, c := range configs {
				fmt.Fprintf(b, " %s |", overviewCell(r.find(p, k.scen, k.c, c)))
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
}

// scenario finds a scenario's spec among those of the run.
func (r *Results) scenario(name string) (ScenarioSpec, bool) {
	for _, s := range r.Scenarios {
		if s.Name == name {
			return s, true
		}
	}
	return ScenarioSpec{}, false
}

// Goals of one-way messaging (issue 18 item 5), reported beside the figures, never
// asserted.
const (
	oneWayLatencyGoalMS = 2.0  // client latency, every profile
	oneWayLinkGoal      = 0.90 // messages/s delivered against what the link's bandwidth allows
)

// writeDeliveryTable is a one-way scenario's second table: when the server had the
// calls, and what that is against the link's bandwidth.
func writeDeliveryTable(b *strings.Builder, r *Results, profile, scenario string, mode int, configs []string) {
	b.WriteString("Delivery: the measured calls as the server received them (each byte for byte; the run waits for every call the client saw acknowledged before it reads the link and CPU counters). delivery s: from the first call's start to the last arrival; msgs/s = messages delivered / delivery s; link allows: the link's rate over the IP bytes per message the link carried (those of packets its queue dropped are left out: they took none of its time), in the tighter direction. backlog: the messages that arrived after the client's last call, and their pace then (n/a under 100 messages or 1 s): the gateways' with messages waiting, which the client's own rate no longer bounds.\n\n")
	b.WriteString("| configuration | status | calls acknowledged | delivered | duplicates | client p50 ms | client p99 ms | delivery s | last arrival after last call s | msgs/s delivered | up B/msg | down B/msg | total B/msg | link allows msgs/s | delivered / allowed | backlog msgs | backlog msgs/s | backlog / allowed |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range configs {
		x, ok := r.find(profile, scenario, mode, c)
		if !ok {
			continue
		}
		d := x.Delivery
		if d == nil {
			fmt.Fprintf(b, "| %s | %s |%s\n", x.Config, mdCell(x.Status), strings.Repeat(" |", 16))
			continue
		}
		up, down, total := "n/a", "n/a", "n/a"
		if e := x.PerExchange; e != nil {
			up, down, total = bytesCell(e.UpBytes), bytesCell(e.DownBytes), bytesCell(e.TotalBytes)
		}
		allows, ratio := "n/a", "n/a"
		if d.LinkAllowsPerSec > 0 {
			allows, ratio = fmt.Sprintf("%.1f", d.LinkAllowsPerSec), fmt.Sprintf("%.0f%%", 100*d.LinkRatio)
		}
		backlog, backlogRatio := "n/a", "n/a"
		if d.BacklogPerSec > 0 {
			backlog = fmt.Sprintf("%.1f", d.BacklogPerSec)
			if d.LinkAllowsPerSec > 0 {
				backlogRatio = fmt.Sprintf("%.0f%%", 100*d.BacklogRatio)
			}
		}
		fmt.Fprintf(b, "| %s | %s | %d | %d | %d | %s | %s | %s | %s | %.1f | %s | %s | %s | %s | %s | %d | %s | %s |\n",
			x.Config, x.Status, x.OK, d.Messages, d.Duplicates, ms(x.Latency.P50), ms(x.Latency.P99), secs(d.MS/1000), secs(d.AfterClientMS/1000),
			d.PerSec, up, down, total, allows, ratio, d.BacklogMessages, backlog, backlogRatio)
	}
	b.WriteString("\n")
}

// writeOneWay compares each one-way scenario with its synchronous twin, profile by
// profile, against the goals.
func writeOneWay(b *strings.Builder, r *Results, configs []string) {
	header := false
	for _, spec := range r.Scenarios {
		if !spec.OneWay {
			continue
		}
		for _, mode := range modesOfScenario(r, spec.Name) {
			if !header {
				b.WriteString("## One-way messaging\n\n")
				fmt.Fprintf(b, "Goals (issue 18 item 5), reported, not asserted: client latency ≤ %g ms on every profile; messages delivered per second ≥ %.0f %% of what the link's bandwidth allows for the IP bytes each message takes on it (as the link carried them: packets its queue dropped are left out). A configuration that only forwards (direct, nginx-pair) makes a one-way call synchronous: the client waits the round trip for the server's 202. Messages cannot be delivered faster than the client sends them (client calls/s) nor than the link allows.\n\n",
					oneWayLatencyGoalMS, 100*oneWayLinkGoal)
				header = true
			}
			sync := spec.Synchronous
			fmt.Fprintf(b, "### %s, %s\n\n", spec.Name, modeName(mode))
			fmt.Fprintf(b, "| profile | configuration | client p50 / p99 ms | ≤ %g ms | client calls/s | msgs/s delivered | IP B/msg | link allows msgs/s | delivered / allowed |", oneWayLatencyGoalMS)
			if sync != "" {
				fmt.Fprintf(b, " %s: p50 / p99 ms | %s: calls/s |", sync, sync)
			}
			b.WriteString("\n|---|---|---:|---|---:|---:|---:|---:|---:|")
			if sync != "" {
				b.WriteString("---:|---:|")
			}
			b.WriteString("\n")
			for _, p := range r.Profiles {
				for _, c := range configs {
					x, ok := r.find(p.Name, spec.Name, mode, c)
					if !ok {
						continue
					}
					fmt.Fprintf(b, "| %s | %s | %s |", p.Name, c, oneWayCells(x))
					if sync != "" {
						y, ok := r.find(p.Name, sync, mode, c)
						switch {
						case !ok:
							b.WriteString(" | |")
						case y.Status != StatusOK:
							fmt.Fprintf(b, " %s | |", y.Status)
						default:
							fmt.Fprintf(b, " %s / %s | %.1f |", ms(y.Latency.P50), ms(y.Latency.P99), y.CallsPerSec)
						}
					}
					b.WriteString("\n")
				}
			}
			b.WriteString("\n")
		}
	}
}

// oneWayCells are a run's cells of the one-way summary, from "client p50 / p99" to
// "delivered / allowed" (seven cells, without the outer pipes).
func oneWayCells(x RunResult) string {
	if x.Status != StatusOK || x.Delivery == nil {
		return x.Status + " | | | | | |"
	}
	goal := "no"
	switch {
	case x.Latency.P99 <= oneWayLatencyGoalMS:
		goal = "yes"
	case x.Latency.P50 <= oneWayLatencyGoalMS:
		goal = "p50 only"
	}
	d := x.Delivery
	perMsg, allows, ratio := "n/a", "n/a", "n/a"
	if x.PerExchange != nil {
		perMsg = bytesCell(x.PerExchange.TotalBytes)
	}
	if d.LinkAllowsPerSec > 0 {
		allows, ratio = fmt.Sprintf("%.1f", d.LinkAllowsPerSec), fmt.Sprintf("%.0f%%", 100*d.LinkRatio)
		if d.BacklogRatio > 0 {
			ratio += fmt.Sprintf(" (backlog %.0f%%)", 100*d.BacklogRatio)
		}
	}
	return fmt.Sprintf("%s / %s | %s | %.1f | %.1f | %s | %s | %s", ms(x.Latency.P50), ms(x.Latency.P99), goal, x.CallsPerSec, d.PerSec, perMsg, allows, ratio)
}

// modesOfScenario lists the concurrencies the scenario ran with, on any profile.
func modesOfScenario(r *Results, scenario string) []int {
	var out []int
	for _, x := range r.Runs {
		if x.Scenario == scenario && !slices.Contains(out, x.Concurrency) {
			out = append(out, x.Concurrency)
		}
	}
	slices.Sort(out)
	return out
}

// overviewCell is "p50 (bytes)" for an overview table, or the run's status.
func overviewCell(x RunResult, ok bool) string {
	switch {
	case !ok:
		return ""
	case x.Status != StatusOK:
		return x.Status
	}
	cell := ms(x.Latency.P50)
	if x.PerExchange != nil {
		cell += fmt.Sprintf(" (%s)", bytesCell(x.PerExchange.TotalBytes))
	}
	return cell
}
