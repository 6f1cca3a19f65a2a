package groupcommit

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: Close must wait for
// the commit loop.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
