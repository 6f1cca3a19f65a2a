//go:build !unix

package procs

import "time"

// processCPUTime is nil where getrusage is missing: the controller does not start.
var processCPUTime func() time.Duration
