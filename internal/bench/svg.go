package bench

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
)

// Chart is one SVG file of the report.
type Chart struct {
	Profile string
	Title   string
	File    string
	SVG     []byte
}

// palette gives each configuration a stable colour (by its position in the run).
var palette = []string{"#7f7f7f", "#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#bcbd22"}

var unsafeFile = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func fileSafe(s string) string { return unsafeFile.ReplaceAllString(s, "_") }

// Charts draws, per profile: latency p50/p99 by configuration for every scenario (one
// chart per concurrency), and bytes per exchange by configuration (when the link
// counted packets).
func Charts(r *Results) []Chart {
	configs := configOrder(r)
	var out []Chart
	for _, p := range r.Profiles {
		scens := scenariosOf(r, p.Name)
		if len(scens) == 0 {
			continue
		}
		modes := modesOf(r, p.Name)
		for _, mode := range modes {
			var panels []panel
			for _, s := range scens {
				pn := panel{title: s, unit: "ms"}
				for _, c := range configs {
					x, ok := r.find(p.Name, s, mode, c)
					if !ok {
						continue
					}
					b := bar{label: c}
					if x.Status == StatusOK && x.Latency.N > 0 {
						b.segments = []float64{x.Latency.P50}
						b.whisker = x.Latency.P99
						b.text = fmt.Sprintf("p50 %s, p99 %s ms", ms(x.Latency.P50), ms(x.Latency.P99))
					} else {
						b.text = x.Status
					}
					pn.bars = append(pn.bars, b)
				}
				panels = append(panels, pn)
			}
			title := fmt.Sprintf("%s: latency per call by configuration, %s (bar p50, line to p99)", p.Name, modeName(mode))
			out = append(out, Chart{
				Profile: p.Name, Title: title,
				File: fmt.Sprintf("latency-%s-c%d.svg", fileSafe(p.Name), mode),
				SVG:  drawPanels(title, panels, configs, nil),
			})
		}
		out = append(out, deliveryCharts(r, p, scens, modes, configs)...)
		// Bytes per exchange: the lowest concurrency (bytes barely depend on it).
		mode := modes[0]
		var panels []panel
		have := false
		for _, s := range scens {
			pn := panel{title: s, unit: "B"}
			for _, c := range configs {
				x, ok := r.find(p.Name, s, mode, c)
				if !ok {
					continue
				}
				b := bar{label: c}
				if e := x.PerExchange; x.Status == StatusOK && e != nil {
					have = true
					b.segments = []float64{e.PureTCPBytes, e.TCPDataBytes, e.UDPBytes, e.OtherBytes}
					b.text = fmt.Sprintf("%.0f B, %.1f packets", e.TotalBytes, e.Packets)
				} else if x.Status == StatusOK {
					b.text = "n/a"
				} else {
					b.text = x.Status
				}
				pn.bars = append(pn.bars, b)
			}
			panels = append(panels, pn)
		}
		if have {
			title := fmt.Sprintf("%s: IP bytes on the link per exchange (both directions), %s", p.Name, modeName(mode))
			out = append(out, Chart{
				Profile: p.Name, Title: title,
				File: fmt.Sprintf("bytes-%s.svg", fileSafe(p.Name)),
				SVG: drawPanels(title, panels, configs, []legendItem{
					{"pure TCP (SYN/FIN/ACK)", segColors[0]}, {"TCP data", segColors[1]}, {"UDP", segColors[2]}, {"other", segColors[3]},
				}),
			})
		}
	}
	return out
}

// deliveryCharts draw, for a profile with one-way runs, the messages per second the
// server received by configuration: one panel per one-way scenario and one for its
// synchronous twin when that ran too.
func deliveryCharts(r *Results, p Profile, scens []string, modes []int, configs []string) []Chart {
	var names []string
	for _, s := range scens {
		spec, ok := r.scenario(s)
		if !ok || !spec.OneWay {
			continue
		}
		if spec.Synchronous != "" && slices.Contains(scens, spec.Synchronous) && !slices.Contains(names, spec.Synchronous) {
			names = append(names, spec.Synchronous)
		}
		names = append(names, s)
	}
	if len(names) == 0 {
		return nil
	}
	var out []Chart
	for _, mode := range modes {
		var panels []panel
		for _, s := range names {
			pn := panel{title: s + ", delivered to the server", unit: "msg/s"}
			for _, c := range configs {
				x, ok := r.find(p.Name, s, mode, c)
				if !ok {
					continue
				}
				b := bar{label: c, text: x.Status}
				if d := x.Delivery; x.Status == StatusOK && d != nil && d.PerSec > 0 {
					b.segments = []float64{d.PerSec}
					b.text = fmt.Sprintf("%.1f msg/s", d.PerSec)
					if d.LinkAllowsPerSec > 0 {
						b.text += fmt.Sprintf(", %.0f%% of link", 100*d.LinkRatio)
					}
				}
				pn.bars = append(pn.bars, b)
			}
			panels = append(panels, pn)
		}
		title := fmt.Sprintf("%s: messages per second delivered to the server, %s", p.Name, modeName(mode))
		out = append(out, Chart{
			Profile: p.Name, Title: title,
			File: fmt.Sprintf("delivery-%s-c%d.svg", fileSafe(p.Name), mode),
			SVG:  drawPanels(title, panels, configs, nil),
		})
	}
	return out
}

// segColors fill the stacked segments of a bytes bar (a latency bar has one segment
// and takes the configuration's colour instead).
var segColors = []string{"#bbbbbb", "#1f77b4", "#ff7f0e", "#9467bd"}

type bar struct {
	label    string
	segments []float64 // stacked; empty: no value
	whisker  float64   // a line to this value (0: none)
	text     string
}

type panel struct {
	title string
	unit  string
	bars  []bar
}

type legendItem struct{ label, color string }

// Layout constants of drawPanels.
const (
	svgWidth    = 960
	panelCols   = 2
	panelGap    = 24
	marginX     = 16
	labelWidth  = 120
	textWidth   = 150
	barHeight   = 14
	barGap      = 6
	panelTitleH = 22
	axisH       = 18
	headerH     = 30
	legendH     = 22
)

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*e >= v*(1-1e-9) {
			return m * e
		}
	}
	return 10 * e
}

func fmtTick(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%gk", v/1e3)
	}
	return fmt.Sprintf("%g", v)
}

func esc(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// drawPanels lays panels out in a grid, each with its own linear scale.
func drawPanels(title string, panels []panel, configs []string, legend []legendItem) []byte {
	colorOf := map[string]string{}
	for i, c := range configs {
		colorOf[c] = palette[i%len(palette)]
	}
	panelW := (svgWidth - 2*marginX - (panelCols-1)*panelGap) / panelCols
	maxBars := 1
	for _, p := range panels {
		maxBars = max(maxBars, len(p.bars))
	}
	panelH := panelTitleH + maxBars*(barHeight+barGap) + axisH
	rows := (len(panels) + panelCols - 1) / panelCols
	top := headerH
	if legend != nil {
		top += legendH
	}
	height := top + rows*(panelH+panelGap) + 8

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		svgWidth, height, svgWidth, height)
	fmt.Fprintf(&b, `<title>%s</title>`+"\n", esc(title))
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", svgWidth, height)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", marginX, esc(title))
	if legend != nil {
		x := marginX
		for _, l := range legend {
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
				x, headerH+2, l.color, x+16, headerH+12, esc(l.label))
			x += 24 + 7*len(l.label)
		}
	}
	for i, p := range panels {
		px := marginX + (i%panelCols)*(panelW+panelGap)
		py := top + (i/panelCols)*(panelH+panelGap)
		drawPanel(&b, p, px, py, panelW, colorOf, legend != nil)
	}
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

func drawPanel(b *strings.Builder, p panel, x, y, w int, colorOf map[string]string, stacked bool) {
	fmt.Fprintf(b, `<g>`+"\n")
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="12" font-weight="bold">%s</text>`+"\n", x, y+14, esc(p.title+" ("+p.unit+")"))
	plotX := x + labelWidth
	plotW := w - labelWidth - textWidth
	var top float64
	for _, br := range p.bars {
		var sum float64
		for _, s := range br.segments {
			sum += s
		}
		top = max(top, sum, br.whisker)
	}
	step := niceCeil(top / 4)
	scale := step * math.Max(1, math.Ceil(top/step*(1-1e-9)))
	ticks := int(math.Round(scale / step))
	axisY := y + panelTitleH + len(p.bars)*(barHeight+barGap)
	// Grid and ticks.
	for k := 0; k <= ticks; k++ {
		v := step * float64(k)
		gx := plotX + int(float64(plotW)*v/scale)
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#e0e0e0"/>`+"\n", gx, y+panelTitleH-2, gx, axisY)
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", gx, axisY+12, esc(fmtTick(v)))
	}
	for j, br := range p.bars {
		by := y + panelTitleH + j*(barHeight+barGap)
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", plotX-6, by+barHeight-3, esc(br.label))
		pos := 0.0
		for k, s := range br.segments {
			if s <= 0 {
				continue
			}
			color := colorOf[br.label]
			if stacked {
				color = segColors[k%len(segColors)]
			}
			x0 := plotX + int(float64(plotW)*pos/scale)
			pos += s
			x1 := plotX + int(float64(plotW)*pos/scale)
			fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"><title>%s: %s</title></rect>`+"\n",
				x0, by, max(x1-x0, 1), barHeight, color, esc(br.label), esc(br.text))
		}
		if br.whisker > 0 && len(br.segments) > 0 {
			x0 := plotX + int(float64(plotW)*pos/scale)
			x1 := plotX + int(float64(plotW)*br.whisker/scale)
			mid := by + barHeight/2
			fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333" stroke-width="1.5"/>`+"\n", x0, mid, x1, mid)
			fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333" stroke-width="1.5"/>`+"\n", x1, by+2, x1, by+barHeight-2)
		}
		fmt.Fprintf(b, `<text x="%d" y="%d" fill="#333">%s</text>`+"\n", plotX+plotW+6, by+barHeight-3, esc(br.text))
	}
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", plotX, axisY, plotX+plotW, axisY)
	b.WriteString("</g>\n")
}
