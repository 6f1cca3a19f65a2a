package proxy

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNewExchangeID: ids are the process's prefix and a counter that only grows (the
// token codec codes the counter as a delta), and cost one allocation.
func TestNewExchangeID(t *testing.T) {
	a, b := newExchangeID(), newExchangeID()
	require.True(t, strings.HasPrefix(a, exchangeIDPrefix), a)
	require.Len(t, exchangeIDPrefix, 9, "8 hex digits and a dash")
	na, err := strconv.ParseUint(strings.TrimPrefix(a, exchangeIDPrefix), 10, 64)
	require.NoError(t, err)
	nb, err := strconv.ParseUint(strings.TrimPrefix(b, exchangeIDPrefix), 10, 64)
	require.NoError(t, err)
	require.Equal(t, na+1, nb)
	require.LessOrEqual(t, testing.AllocsPerRun(100, func() { _ = newExchangeID() }), 1.0)
}
