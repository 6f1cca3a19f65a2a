package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: a gateway started and
// shut down by a test (startGateway, demo) must stop everything it started.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
