package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// mallocsMetric is the Go collector's count of heap objects a process has allocated.
const mallocsMetric = "go_memstats_mallocs_total"

// allocCounter reads how many heap objects the soapgw processes of a configuration have
// allocated, from their admin endpoints' /metrics, for the allocations per exchange of
// the CPU comparison (issue #19 asks for them before and after each change). Reading the
// count allocates too: a batch's count is taken as after − before − one reading's own
// allocations, measured right after the batch by reading once more while idle.
type allocCounter struct {
	client *http.Client
	urls   []string
}

// newAllocCounter returns nil when the configuration has no admin endpoint (nginx).
func newAllocCounter(endpoints map[string]string) *allocCounter {
	var roles []string
	for k := range endpoints {
		if strings.HasSuffix(k, "-admin") {
			roles = append(roles, k)
		}
	}
	if len(roles) == 0 {
		return nil
	}
	sort.Strings(roles)
	a := &allocCounter{client: &http.Client{Timeout: 10 * time.Second}}
	for _, r := range roles {
		a.urls = append(a.urls, "http://"+endpoints[r]+"/metrics")
	}
	return a
}

// read returns the objects allocated so far by all the configuration's processes.
func (a *allocCounter) read(ctx context.Context) (float64, error) {
	var sum float64
	for _, u := range a.urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return 0, err
		}
		// Uncompressed: a gzip writer taken from an emptied pool would make one
		// reading's allocations differ from the next's.
		req.Header.Set("Accept-Encoding", "identity")
		resp, err := a.client.Do(req)
		if err != nil {
			return 0, err
		}
		n, err := parseMallocs(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", u, err)
		}
		sum += n
	}
	return sum, nil
}

// parseMallocs finds mallocsMetric in a Prometheus text exposition.
func parseMallocs(r io.Reader) (float64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || name != mallocsMetric {
			continue
		}
		if i := strings.IndexByte(value, ' '); i >= 0 {
			value = value[:i] // a timestamp follows
		}
		return strconv.ParseFloat(value, 64)
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s in the metrics", mallocsMetric)
}

// allocSpan counts a batch's allocations: begin before it, end after it.
type allocSpan struct {
	a      *allocCounter
	before float64
	ok     bool
}

func (a *allocCounter) begin(ctx context.Context) allocSpan {
	if a == nil {
		return allocSpan{}
	}
	v, err := a.read(ctx)
	return allocSpan{a: a, before: v, ok: err == nil}
}

// end returns the objects allocated since begin, less the readings' own; ok is false
// when a reading failed (the batch then counts for no allocation figure).
func (s allocSpan) end(ctx context.Context) (float64, bool) {
	if !s.ok {
		return 0, false
	}
	after, err := s.a.read(ctx)
	if err != nil {
		return 0, false
	}
	again, err := s.a.read(ctx)
	if err != nil {
		return 0, false
	}
	return max(after-s.before-(again-after), 0), true
}
