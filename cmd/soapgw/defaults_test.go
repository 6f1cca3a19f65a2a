package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/proxy"
	"github.com/soapgw/soapgw/internal/tunnel"
)

// TestOneWayDeliveriesFitOneTunnelConnection: by default one tunnel connection carries
// every one-way delivery the edge runs at once. With fewer streams than deliveries, a
// spool draining over a slow link was held to the origin's stream limit per round trip,
// and the extra connection meant to add streams could not finish its handshake on a
// link whose queue those deliveries kept full (seen on gprs: 100 msg/s, 140 with room).
func TestOneWayDeliveriesFitOneTunnelConnection(t *testing.T) {
	require.GreaterOrEqual(t, int(tunnel.DefaultConfig().MaxStreams), proxy.DefaultOneWayDeliveries)
}
