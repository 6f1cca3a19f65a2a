package procs

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: Stop must end the loop.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
