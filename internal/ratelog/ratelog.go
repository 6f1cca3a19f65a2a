// Package ratelog writes log lines that an attacker or a broken peer could otherwise make
// by the million: at most one line per cause per interval, carrying how many were
// suppressed since the last line. It starts no goroutine and arms no timer: a line is
// written when an event arrives after the interval has passed, so a burst's count
// appears with its next event.
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Limiter rate-limits log lines by cause. Causes must come from a fixed set (they key a
// map that is never pruned). The zero value is not usable; use New.
type Limiter struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	mu     sync.Mutex
	causes map[string]*cause
}

type cause struct {
	last       time.Time
	suppressed int
}

// New returns a limiter writing to log at most once per every for each cause.
func New(log *slog.Logger, every time.Duration) *Limiter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Limiter{log: log, every: every, now: time.Now, causes: map[string]*cause{}}
}

// Log writes msg at level with the cause and args, unless a line for the same cause was
// written less than the interval ago; then it only counts it. The next line written for
// the cause carries "suppressed": the number not written since the previous one.
func (l *Limiter) Log(level slog.Level, key, msg string, args ...any) {
	now := l.now()
	l.mu.Lock()
	c := l.causes[key]
	if c == nil {
		c = &cause{}
		l.causes[key] = c
	}
	if !c.last.IsZero() && now.Sub(c.last) < l.every {
		c.suppressed++
		l.mu.Unlock()
		return
	}
	n := c.suppressed
	c.last, c.suppressed = now, 0
	l.mu.Unlock()
	if n > 0 {
		args = append(args, "suppressed", n, "suppressed_over", l.every.String())
	}
	l.log.Log(context.Background(), level, msg, args...)
}

// Warn is Log at warning level.
func (l *Limiter) Warn(key, msg string, args ...any) { l.Log(slog.LevelWarn, key, msg, args...) }
