package testutil

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// recorder is a testing.TB that records how a test ended.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Helper()                      {}
func (r *recorder) Skip(args ...any)             { r.skipped, r.msg = true, args[0].(string) }
func (r *recorder) Fatalf(f string, args ...any) { r.failed = true }

func TestNeedsSkipsLocallyAndFailsInCI(t *testing.T) {
	missing := errors.New("not found")
	t.Setenv("CI", "")
	r := &recorder{TB: t}
	Needs(r, "nginx", missing, "apt-get install nginx")
	require.True(t, r.skipped)
	require.Contains(t, r.msg, "apt-get install nginx")

	t.Setenv("CI", "true")
	r = &recorder{TB: t}
	Needs(r, "nginx", missing, "apt-get install nginx")
	require.True(t, r.failed, "in CI a missing dependency fails")
	require.False(t, r.skipped)

	r = &recorder{TB: t}
	Needs(r, "nginx", nil, "")
	require.False(t, r.failed || r.skipped, "present: the test runs")
}
