package main

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"

	"github.com/soapgw/soapgw/internal/procs"
)

// adaptProcs fits the runtime's GOMAXPROCS to the gateway's load (internal/procs: one P
// while one is enough, up to the runtime's own number under load), unless the operator
// set GOMAXPROCS. It returns what stops the adaptation and, for the startup log, what
// the process runs with.
//
// The runtime's own number, taken here once, already follows a container's CPU limit;
// setting GOMAXPROCS from the program ends the runtime's later updates of it, so a limit
// changed while the gateway runs takes effect at its next start.
func adaptProcs(log *slog.Logger) (stop func(), state string) {
	if v := os.Getenv("GOMAXPROCS"); v != "" {
		return func() {}, "GOMAXPROCS=" + v
	}
	most := runtime.GOMAXPROCS(0)
	c := procs.Start(procs.Config{
		Max: most,
		Set: func(n int) { runtime.GOMAXPROCS(n) },
		OnChange: func(from, to int, busy float64) {
			log.Debug("runtime Ps changed with the load", "from", from, "to", to, "busy_cpus", fmt.Sprintf("%.2f", busy))
		},
	})
	if c == nil {
		return func() {}, fmt.Sprint(most)
	}
	return c.Stop, fmt.Sprintf("adaptive 1-%d", most)
}
