package main

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"

	"github.com/soapgw/soapgw/internal/config"
	"github.com/soapgw/soapgw/internal/procs"
)

// adaptProcs fits the runtime's GOMAXPROCS to the gateway's load (internal/procs: one P
// while one is enough, up to the runtime's own number under load), unless the operator
// set GOMAXPROCS. It returns what stops the adaptation and, for the startup log, what
// the process runs with.
//
// A gateway with one-way messaging syncs its spool or ledger on every message, a system
// call that holds its P for the length of a disk flush: it keeps at least two Ps, so
// that nothing else waits for the flush.
//
// The runtime's own number, taken here once, already follows a container's CPU limit;
// setting GOMAXPROCS from the program ends the runtime's later updates of it, so a limit
// changed while the gateway runs takes effect at its next start.
func adaptProcs(cfg *config.Config, log *slog.Logger) (stop func(), state string) {
	if v := os.Getenv("GOMAXPROCS"); v != "" {
		return func() {}, "GOMAXPROCS=" + v
	}
	most := runtime.GOMAXPROCS(0)
	least := 1
	if syncsEachMessage(cfg) {
		least = 2
	}
	c := procs.Start(procs.Config{
		Max: most,
		Min: least,
		Set: func(n int) { runtime.GOMAXPROCS(n) },
		OnChange: func(from, to int, why string, busy float64) {
			if why == "stalls" {
				// At most once per P the host has: the new number is a floor from now on.
				log.Info("runtime Ps raised for good: goroutines waited a millisecond or more for one (long system calls, or a busy host)",
					"from", from, "to", to, "busy_cpus", fmt.Sprintf("%.2f", busy))
				return
			}
			log.Debug("runtime Ps changed", "from", from, "to", to, "why", why, "busy_cpus", fmt.Sprintf("%.2f", busy))
		},
	})
	if c == nil {
		return func() {}, fmt.Sprint(most)
	}
	return c.Stop, fmt.Sprintf("adaptive %d-%d", min(least, most), most)
}

// syncsEachMessage reports whether the gateway flushes a file to disk per message: the
// edge's one-way spool, the origin's one-way ledger.
func syncsEachMessage(cfg *config.Config) bool {
	return cfg.Edge != nil && cfg.Edge.OneWay != nil || cfg.Origin != nil && cfg.Origin.OneWay != nil
}
