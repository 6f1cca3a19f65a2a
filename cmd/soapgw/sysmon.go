package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"syscall"
)

// The Go runtime's system monitor (sysmon) is a thread that polls every 20 µs to 10 ms.
// When every P is idle it sleeps deeply, and the next system call wakes it with a futex
// and resets it to its 20 µs cadence. A gateway is idle between most of its system calls
// (it waits for the peer, the client or the server), so at one exchange in flight sysmon
// was woken on nearly every exchange and then polled 20 µs at a time: 3.6 nanosleeps and
// several futex calls per exchange, 10-15 % of the edge's CPU in a profile, and about
// half of all thread wake-ups (the runtime's known cost, golang/go#18236).
//
// The runtime keeps sysmon out of its deep sleep when GODEBUG's schedtrace is set, so its
// period simply backs off to 10 ms while nothing needs it. schedtrace is read only at
// process start, so `soapgw run` re-executes itself once with it added. Measured with
// `soapgw bench cpu` (the same build, with and without): 8-22 % less CPU per exchange
// through the pair, wake-ups per exchange about halved, exchanges/s up 5-13 %. The cost:
// an idle gateway's sysmon wakes 100 times a second (a few µs each) instead of sleeping.
//
// quietSysmonSetting prints a scheduler line (`SCHED ...`) on standard error once every
// 24.8 days of the host's monotonic clock: the largest period the setting takes. An
// operator who sets schedtrace in GODEBUG (for example `GODEBUG=schedtrace=0`) keeps the
// runtime's default and no re-execution happens.
const quietSysmonSetting = "schedtrace=2147483647"

// sysmonState says, for the startup log, whether this process runs with a quiet sysmon.
// It is set before anything else runs in main.
var sysmonState = "runtime default"

// quietSysmonEnv returns env with quietSysmonSetting added to GODEBUG, and false if env
// needs no change (schedtrace is already set, by soapgw or by the operator).
func quietSysmonEnv(env []string) ([]string, bool) {
	const key = "GODEBUG="
	var settings []string
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, key) {
			out = append(out, kv)
			continue
		}
		for _, s := range strings.Split(kv[len(key):], ",") {
			if s == "" {
				continue
			}
			if name, _, _ := strings.Cut(s, "="); strings.TrimSpace(name) == "schedtrace" {
				return env, false
			}
			settings = append(settings, s)
		}
	}
	settings = append(settings, quietSysmonSetting)
	return append(out, key+strings.Join(settings, ",")), true
}

// reexecWithQuietSysmon replaces the process with itself under quietSysmonSetting (same
// PID, arguments and environment otherwise) when GODEBUG does not set schedtrace yet. It
// returns only if no re-execution was needed or it failed; a failure is not fatal (the
// gateway runs with the runtime's default) and is written to stderr.
func reexecWithQuietSysmon(stderr io.Writer) {
	env, change := quietSysmonEnv(os.Environ())
	if !change {
		if strings.Contains(os.Getenv("GODEBUG"), quietSysmonSetting) {
			sysmonState = "quiet"
		} else {
			sysmonState = "runtime default (GODEBUG sets schedtrace)"
		}
		return
	}
	if runtime.GOOS != "linux" {
		return
	}
	// /proc/self/exe still names the running binary when its file was replaced or
	// removed since the start (an upgrade in place).
	err := syscall.Exec("/proc/self/exe", os.Args, env)
	sysmonState = "runtime default (re-execution failed)"
	fmt.Fprintf(stderr, "soapgw: could not re-execute with %s (the gateway runs, at more CPU per exchange): %v\n", quietSysmonSetting, err)
}
