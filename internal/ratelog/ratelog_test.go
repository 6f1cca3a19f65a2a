package ratelog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLimiterOneLinePerCausePerInterval(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewTextHandler(&buf, nil)), 10*time.Second)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }

	for range 5 {
		l.Warn("a", "refused", "cause", "a")
	}
	l.Warn("b", "refused", "cause", "b")
	now = now.Add(9 * time.Second)
	l.Warn("a", "refused", "cause", "a")
	now = now.Add(2 * time.Second)
	l.Warn("a", "refused", "cause", "a")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 3, buf.String())
	require.Contains(t, lines[0], "cause=a")
	require.NotContains(t, lines[0], "suppressed")
	require.Contains(t, lines[1], "cause=b")
	require.Contains(t, lines[2], "cause=a")
	require.Contains(t, lines[2], "suppressed=5") // four in the burst, one 9 s later
}
