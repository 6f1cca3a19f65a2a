package main

import (
	"github.com/spf13/cobra"

	"github.com/soapgw/soapgw/internal/config"
)

func newConfigCommand(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Work with configuration files"}
	cmd.AddCommand(&cobra.Command{
		Use:   "check FILE",
		Short: "Validate FILE and print the effective configuration with every default filled in",
		Long: `Validates FILE exactly as 'soapgw run' would (unknown keys, types, addresses, references
between sections) and prints the effective configuration. Exit status 0 when valid, 2 with
file:line errors otherwise.`,
		Args: exactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			cfg, err := config.Load(args[0])
			if err != nil {
				return usageError{err}
			}
			out, err := cfg.Marshal()
			if err != nil {
				return err
			}
			_, err = g.stdout.Write(out)
			return err
		},
	})
	return cmd
}
