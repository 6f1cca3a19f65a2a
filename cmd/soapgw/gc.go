package main

import (
	"fmt"
	"os"

	"github.com/soapgw/soapgw/internal/gcheadroom"
)

// gcHeadroom is the least the heap may grow between two garbage collections
// (internal/gcheadroom): 16 MiB, at most that much memory above the runtime's default.
const gcHeadroom = 16 << 20

// tuneGC gives the garbage collector a fixed headroom, unless the operator set GOGC. It
// returns what stops the tuning and, for the startup log, what the process runs with.
func tuneGC() (stop func(), state string) {
	if v := os.Getenv("GOGC"); v != "" {
		return func() {}, "GOGC=" + v
	}
	t := gcheadroom.Start(gcheadroom.Config{Headroom: gcHeadroom})
	return t.Stop, fmt.Sprintf("headroom %d MiB", gcHeadroom>>20)
}
