package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseMallocs(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       float64
		err        string
	}{
		{name: "plain", text: "# HELP go_memstats_mallocs_total x\n# TYPE go_memstats_mallocs_total counter\ngo_memstats_mallocs_total 1.234567e+06\n", want: 1234567},
		{name: "with timestamp", text: "go_memstats_mallocs_total 42 1700000000000\n", want: 42},
		{name: "similar names first", text: "go_memstats_mallocs_total_x 1\ngo_memstats_frees_total 7\ngo_memstats_mallocs_total 9\n", want: 9},
		{name: "absent", text: "go_memstats_frees_total 7\n", err: "no go_memstats_mallocs_total"},
		{name: "not a number", text: "go_memstats_mallocs_total many\n", err: "invalid syntax"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMallocs(strings.NewReader(tc.text))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// TestAllocSpanSubtractsReadings: a batch's count is what the processes allocated
// between the readings, less what one reading allocates itself.
func TestAllocSpanSubtractsReadings(t *testing.T) {
	const perReading = 700 // what serving one reading allocates
	serve := func(count *atomic.Int64) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Accept-Encoding") != "identity" {
				http.Error(w, "compressed readings allocate unevenly", http.StatusBadRequest)
				return
			}
			fmt.Fprintf(w, "go_memstats_mallocs_total %d\n", count.Load())
			count.Add(perReading)
		}))
	}
	var edgeCount, originCount atomic.Int64
	edge, origin := serve(&edgeCount), serve(&originCount)
	defer origin.Close()
	defer edge.Close()

	a := newAllocCounter(map[string]string{
		"edge": "127.0.0.1:1", "edge-admin": strings.TrimPrefix(edge.URL, "http://"),
		"origin-admin": strings.TrimPrefix(origin.URL, "http://"),
	})
	require.NotNil(t, a)
	require.Len(t, a.urls, 2)
	ctx := context.Background()
	span := a.begin(ctx)
	edgeCount.Add(30_000) // the batch
	originCount.Add(50_000)
	n, ok := span.end(ctx)
	require.True(t, ok)
	require.Equal(t, float64(80_000), n)

	require.Nil(t, newAllocCounter(map[string]string{"edge": "127.0.0.1:1", "origin": "127.0.0.1:2"}), "nginx: no admin endpoint")
	n, ok = (*allocCounter)(nil).begin(ctx).end(ctx)
	require.False(t, ok)
	require.Zero(t, n)

	edge.Close()
	_, ok = a.begin(ctx).end(ctx)
	require.False(t, ok, "a failed reading gives no figure")
}
