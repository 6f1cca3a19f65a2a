package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/soapgw/soapgw/internal/config"
)

func newRunCommand(g *globalOptions) *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "run --config FILE",
		Short: "Run the gateway with the roles (edge, origin or both) the configuration gives",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" {
				return usageError{fmt.Errorf("run: --config FILE is required")}
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg, err := config.Load(path)
			if err != nil {
				return usageError{err}
			}
			ctx := cmd.Context()
			gw, err := startGateway(context.WithoutCancel(ctx), cfg, log)
			if err != nil {
				return err
			}
			// Started with all the runtime's Ps (codec tables, listeners); from here on
			// their number follows the load.
			stopProcs, procsState := adaptProcs(cfg, log)
			defer stopProcs()
			stopGC, gcState := tuneGC()
			defer stopGC()
			log.Info("soapgw running", "node", cfg.Node, "version", versionString(), "sysmon", sysmonState, "procs", procsState, "gc", gcState, "edge", cfg.Edge != nil, "origin", cfg.Origin != nil)
			// SIGHUP reloads the configuration file (credentials at once; other
			// changes are named and wait for a restart). An invalid file is refused and
			// the running configuration stays.
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			var runErr error
		wait:
			for {
				select {
				case <-ctx.Done():
					log.Info("signal received; draining", "drain_timeout", cfg.DrainTimeout)
					break wait
				case runErr = <-gw.errc:
					log.Error("gateway failed; shutting down", "err", runErr)
					break wait
				case <-hup:
					if err := gw.reloadConfig(path); err != nil {
						log.Error("SIGHUP: configuration refused; the running one stays", "err", err)
					}
				}
			}
			g.stopSignals()
			dctx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout)
			defer cancel()
			start := time.Now()
			if err := gw.shutdown(dctx); err != nil && cfg.DrainTimeout > 0 {
				log.Warn("drain incomplete", "err", err, "after", time.Since(start).Round(time.Millisecond))
				if runErr == nil {
					runErr = err
				}
			} else if cfg.DrainTimeout == 0 {
				log.Info("drain_timeout is 0: exited without draining")
			} else {
				log.Info("drained; exiting", "after", time.Since(start).Round(time.Millisecond))
			}
			return runErr
		},
	}
	cmd.Flags().StringVarP(&path, "config", "c", "", "YAML configuration file")
	return cmd
}
