package linkemu

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: every goroutine
// and timer here has an owner that must stop it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
