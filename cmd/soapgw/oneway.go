package main

import (
	"fmt"

	"github.com/soapgw/soapgw/internal/config"
	"github.com/soapgw/soapgw/internal/ledger"
	"github.com/soapgw/soapgw/internal/proxy"
	"github.com/soapgw/soapgw/internal/spool"
)

// openOneWay opens the edge's spool and maps edge.one_way onto the proxy's settings.
func openOneWay(c *config.EdgeOneWay) (*proxy.OneWayConfig, *spool.Spool, error) {
	sp, err := spool.Open(c.Spool, spool.Limits{MaxBytes: int64(c.MaxBytes), MaxMessages: c.MaxMessages, MaxDead: c.MaxDeadLetters})
	if err != nil {
		return nil, nil, fmt.Errorf("edge.one_way.spool: %w", err)
	}
	ops := make([]proxy.OneWayOperation, 0, len(c.Operations))
	for _, op := range c.Operations {
		ops = append(ops, proxy.OneWayOperation{PathPrefix: op.PathPrefix, Action: op.Action, Operation: op.Operation})
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
