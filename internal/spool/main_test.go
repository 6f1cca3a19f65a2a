package spool

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: Close must stop the
// spool's committer.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
