package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// IsTerminal reports whether w is a character device (a terminal): then progress is
// one line redrawn with \r; otherwise plain lines.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progress shows how far the run is: on a terminal one \r-updated line with a bar;
// elsewhere a line per finished run and a heartbeat line every plainEvery.
type progress struct {
	w     io.Writer
	tty   bool
	total int
	start time.Time

	mu        sync.Mutex
	done      int
	failed    int
	profile   string
	scenario  string
	label     string
	callsDone int
	callsPlan int
	lastDraw  time.Time
	lastPlain time.Time
	width     int
}

const plainEvery = 10 * time.Second

func newProgress(w io.Writer, tty bool, total int) *progress {
	return &progress{w: w, tty: tty, total: max(total, 1), start: time.Now(), lastPlain: time.Now()}
}

func (p *progress) set(profile, scenario string, done int, label string, plan int) {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	p.profile, p.scenario, p.label, p.callsDone, p.callsPlan = profile, scenario, label, done, plan
	p.draw(true)
	p.mu.Unlock()
}

func (p *progress) calls(done int) {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	p.callsDone = done
	p.draw(false)
	p.mu.Unlock()
}

func (p *progress) runDone(status string) {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	p.done++
	if status == StatusFailed {
		p.failed++
	}
	p.callsDone, p.callsPlan = 0, 0
	p.draw(true)
	p.mu.Unlock()
}

// line prints a full line (above the bar on a terminal).
func (p *progress) line(s string) {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.width))
	}
	fmt.Fprintf(p.w, "bench: %s\n", s)
	p.lastPlain = time.Now()
	if p.tty {
		p.draw(true)
	}
}

func (p *progress) finish() {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.width > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.width))
	}
}

// status is the text of the progress line.
func (p *progress) status() string {
	frac := float64(p.done) / float64(p.total)
	if p.callsPlan > 0 {
		frac += float64(p.callsDone) / float64(p.callsPlan) / float64(p.total)
	}
	frac = min(frac, 1)
	elapsed := time.Since(p.start)
	eta := "?"
	if frac > 0.02 {
		eta = (time.Duration(float64(elapsed)/frac) - elapsed).Round(time.Second).String()
	}
	where := strings.Join(strings.Fields(p.profile+" "+p.scenario+" "+p.label), " ")
	calls := ""
	if p.callsPlan > 0 {
		calls = fmt.Sprintf(" %d/%d calls", p.callsDone, p.callsPlan)
	}
	failed := ""
	if p.failed > 0 {
		failed = fmt.Sprintf(" %d FAILED", p.failed)
	}
	return fmt.Sprintf("%3.0f%% run %d/%d%s | %s%s | %s elapsed, ETA %s", 100*frac, min(p.done+1, p.total), p.total, failed, where, calls, elapsed.Round(time.Second), eta)
}

func (p *progress) draw(force bool) {
	now := time.Now()
	if p.tty {
		if !force && now.Sub(p.lastDraw) < 100*time.Millisecond {
			return
		}
		p.lastDraw = now
		const barWidth = 24
		frac := float64(p.done) / float64(p.total)
		filled := min(int(frac*barWidth), barWidth)
		s := "[" + strings.Repeat("=", filled) + strings.Repeat(" ", barWidth-filled) + "] " + p.status()
		if len(s) > 150 {
			s = s[:150]
		}
		pad := max(p.width-len(s), 0)
		fmt.Fprintf(p.w, "\r%s%s", s, strings.Repeat(" ", pad))
		p.width = len(s)
		return
	}
	if now.Sub(p.lastPlain) >= plainEvery {
		p.lastPlain = now
		fmt.Fprintf(p.w, "bench: %s\n", p.status())
	}
}
