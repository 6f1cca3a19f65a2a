// Command soapgw is the SOAP acceleration gateway: run it as an edge beside unmodified
// SOAP clients and as an origin beside the unmodified server (or both in one process).
//
// main stays thin: it builds the root command, wires signals to one context and turns
// errors into exit codes that scripts can rely on (see exitCode).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the gateway failed at run time (listener lost, drain deadline passed)
	exitUsage   = 2 // bad flags, bad or missing configuration: fix the input and retry
)

// usageError marks errors caused by the command line or the configuration.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func main() {
	// Before anything else runs: the gateway re-executes itself once with the runtime
	// setting that keeps sysmon from costing CPU on every exchange (sysmon.go).
	if runsGateway(os.Args[1:]) {
		reexecWithQuietSysmon(os.Stderr)
	}
	// The first SIGINT/SIGTERM cancels ctx: the gateway stops accepting and drains. A
	// second one kills the process at once (signal.NotifyContext restores the default).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr, stop))
}

// runsGateway reports whether args run a long-lived gateway (`soapgw run`).
func runsGateway(args []string) bool {
	c, _, err := newRootCommand(io.Discard, io.Discard, func() {}).Find(args)
	return err == nil && c.Name() == "run"
}

// run executes the command line and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, stopSignals func()) int {
	cmd := newRootCommand(stdout, stderr, stopSignals)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "soapgw: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	return exitFailure
}
