package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
)

// globalOptions are the flags every subcommand shares.
type globalOptions struct {
	logLevel  string
	logFormat string
	stdout    io.Writer
	stderr    io.Writer
	// stopSignals restores default signal handling once a drain has begun, so a second
	// Ctrl-C ends the process at once.
	stopSignals func()
}

func newRootCommand(stdout, stderr io.Writer, stopSignals func()) *cobra.Command {
	g := &globalOptions{stdout: stdout, stderr: stderr, stopSignals: stopSignals}
	root := &cobra.Command{
		Use:   "soapgw",
		Short: "Transparent SOAP acceleration gateway (edge and origin)",
		Long: `soapgw accelerates unmodified SOAP clients and servers. An edge gateway beside the
clients terminates HTTP/1.0 and 1.1 and carries each exchange over one persistent,
multiplexed tunnel to an origin gateway beside the server, which calls the real service.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// Usage errors are marked by type here rather than recognised by their text later:
	// flag errors through the flag error hook, stray words through Args.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.Args = func(_ *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageError{fmt.Errorf("unknown command %q (see soapgw --help)", args[0])}
		}
		return nil
	}
	root.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "text", "log format: text or json")
	root.AddCommand(newRunCommand(g), newDemoCommand(g), newConfigCommand(g), newKeygenCommand(g), newVersionCommand(g), newExampleServerCommand(g), newExampleLoadCommand(g))
	root.AddCommand(newBenchCommand(g), newSpoolCommand(g))
	return root
}

// logger builds the slog logger the flags ask for.
func (g *globalOptions) logger() (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", g.logLevel)}
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(g.logFormat) {
	case "text":
		return slog.New(slog.NewTextHandler(g.stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(g.stderr, opts)), nil
	}
	return nil, usageError{fmt.Errorf("--log-format %q: want text or json", g.logFormat)}
}

// exactArgs is cobra.ExactArgs with the error marked as a usage error.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}
