package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

func versionString() string {
	var settings []debug.BuildSetting
	if bi, ok := debug.ReadBuildInfo(); ok {
		settings = bi.Settings
	}
	return versionWith(version, settings)
}

// versionWith appends the commit the binary was built from, when the build recorded it
// (go build in a git checkout; `make build` asks for it even where GOFLAGS says
// -buildvcs=false), and "-modified" for a build with uncommitted changes, so a benchmark
// report or a bug report names the exact code.
func versionWith(v string, settings []debug.BuildSetting) string {
	var rev string
	var modified bool
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if len(rev) < 12 {
		return v
	}
	v += "+" + rev[:12]
	if modified {
		v += "-modified"
	}
	return v
}

func newVersionCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  exactArgs(0),
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintf(g.stdout, "soapgw %s %s/%s %s\n", versionString(), runtime.GOOS, runtime.GOARCH, runtime.Version())
			return err
		},
	}
}
