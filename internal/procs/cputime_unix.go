//go:build unix

package procs

import (
	"syscall"
	"time"
)

// processCPUTime is the process's user and system CPU time so far.
var processCPUTime = func() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
