package testutil

import (
	"fmt"
	"os"
	"testing"
)

// Needs reports a missing test dependency: on a developer's machine the test is skipped
// with the reason and how to install what is missing; in CI (the CI environment variable
// is set, as .ci/run runs) it fails instead, so a lost install step can never turn into
// a green run that tested nothing.
func Needs(t testing.TB, what string, err error, install string) {
	t.Helper()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("%s unavailable: %v (install: %s)", what, err, install)
	if os.Getenv("CI") != "" {
		t.Fatalf("CI is set, so a missing dependency fails the test: %s", msg)
		return
	}
	t.Skip(msg)
}
