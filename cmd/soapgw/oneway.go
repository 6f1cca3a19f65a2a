package main

import (
	"fmt"
	"log/slog"

	"github.com/soapgw/soapgw/internal/config"
	"github.com/soapgw/soapgw/internal/ledger"
	"github.com/soapgw/soapgw/internal/proxy"
	"github.com/soapgw/soapgw/internal/spool"
)

// openOneWay opens the edge's spool and maps edge.one_way onto the proxy's settings.
// Operations given by a WSDL are read from it now and logged.
func openOneWay(c *config.EdgeOneWay, log *slog.Logger) (*proxy.OneWayConfig, *spool.Spool, error) {
	ops := make([]proxy.OneWayOperation, 0, len(c.Operations))
	for i, op := range c.Operations {
		exp, names, err := op.Expand()
		if err != nil {
			return nil, nil, fmt.Errorf("edge.one_way.operations[%d].wsdl: %w", i, err)
		}
		if op.WSDL != "" {
			log.Info("one-way operations read from the WSDL", "wsdl", op.WSDL, "operations", names, "path_prefix", op.PathPrefix)
		}
		for _, e := range exp {
			ops = append(ops, proxy.OneWayOperation{PathPrefix: e.PathPrefix, Action: e.Action, Operation: e.Operation})
		}
	}
	sp, err := spool.Open(c.Spool, spool.Limits{MaxBytes: int64(c.MaxBytes), MaxMessages: c.MaxMessages, MaxDead: c.MaxDeadLetters})
	if err != nil {
		return nil, nil, fmt.Errorf("edge.one_way.spool: %w", err)
	}
	dead := c.DeadLetters
	return &proxy.OneWayConfig{
		Spool: sp, Operations: ops, AcceptStatus: c.AcceptStatus, Deliveries: c.Deliveries,
		Ordered: c.Ordered, RetryMax: c.RetryMax, DeadLetters: &dead,
	}, sp, nil
}

// openLedger opens the origin's ledger of delivered one-way messages.
func openLedger(c *config.OriginOneWay) (*ledger.Ledger, error) {
	l, err := ledger.Open(c.Ledger, c.Retention)
	if err != nil {
		return nil, fmt.Errorf("origin.one_way.ledger: %w", err)
	}
	return l, nil
}
