package trafficgen

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soapgw/soapgw/internal/soapdemo"
)

func wellFormed(b []byte) error {
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		if _, err := d.Token(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

func TestFamiliesNonEmptyAndPaired(t *testing.T) {
	for _, f := range Families {
		ms := Family(f, DefaultN(f), DefaultSeed)
		if len(ms) != DefaultN(f) {
			t.Errorf("%s: %d messages, want %d", f, len(ms), DefaultN(f))
		}
		for i, m := range ms {
			if m.Family != f || m.Name == "" || len(m.Body) == 0 || (m.Dir != Request && m.Dir != Response) {
				t.Errorf("%s[%d]: bad message %q %q %q len %d", f, i, m.Family, m.Name, m.Dir, len(m.Body))
			}
			if f != "edge" {
				want := Request
				if i%2 == 1 {
					want = Response
				}
				if m.Dir != want {
					t.Errorf("%s[%d]: dir %s, want %s (pairs in wire order)", f, i, m.Dir, want)
				}
			}
		}
	}
	if Family("nope", 10, 1) != nil || Family("stress", 0, 1) != nil {
		t.Error("unknown family or n=0 should give nil")
	}
	if got := len(Family("stress", 7, 1)); got != 7 {
		t.Errorf("odd n: %d messages", got)
	}
}

func TestDeterministic(t *testing.T) {
	for _, f := range Families {
		a, b := Family(f, DefaultN(f), 42), Family(f, DefaultN(f), 42)
		for i := range a {
			if !bytes.Equal(a[i].Body, b[i].Body) || a[i].Name != b[i].Name {
				t.Fatalf("%s[%d] differs between runs", f, i)
			}
		}
		if f == "edge" {
			continue
		}
		c := Family(f, DefaultN(f), 43)
		same := true
		for i := range a {
			same = same && bytes.Equal(a[i].Body, c[i].Body)
		}
		if same {
			t.Errorf("%s: seeds 42 and 43 give the same traffic", f)
		}
		// Traffic varies from message to message.
		if len(a) >= 4 && bytes.Equal(a[0].Body, a[2].Body) && f != "northwind" {
			t.Errorf("%s: first two requests are identical", f)
		}
	}
}

func TestWellFormed(t *testing.T) {
	for _, f := range Families {
		for i, m := range Family(f, DefaultN(f), DefaultSeed) {
			err := wellFormed(m.Body)
			if IsXML(m) && err != nil {
				t.Errorf("%s[%d] %s: %v", f, i, m.Name, err)
			}
			if !IsXML(m) && err == nil {
				t.Errorf("%s[%d] %s: parses as XML but is meant not to", f, i, m.Name)
			}
		}
	}
}

func sizes(f string, n int) map[string][]int {
	s := map[string][]int{}
	for _, m := range Family(f, n, DefaultSeed) {
		s[m.Name] = append(s[m.Name], len(m.Body))
	}
	return s
}

func TestPaperSizes(t *testing.T) {
	// Kangasharju: Stress 652/464, Deploy 655/296 bytes, exactly.
	for name, want := range map[string]int{
		"stress/addEntry": soapdemo.StressRequestSize, "stress/addEntryResponse": soapdemo.StressResponseSize,
		"deploy/deployment": DeployRequestSize, "deploy/AdminResponse": DeployResponseSize,
	} {
		f, op, _ := strings.Cut(name, "/")
		for _, got := range sizes(f, 40)[op] {
			if got != want {
				t.Errorf("%s: %d bytes, want %d", name, got, want)
			}
		}
	}
	for _, m := range Family("deploy", 2, DefaultSeed) {
		doc := m.Body[bytes.Index(m.Body, []byte("<soapenv:Body>"))+len("<soapenv:Body>") : bytes.Index(m.Body, []byte("</soapenv:Body>"))]
		if want := map[string]int{Request: DeployRequestDocSize, Response: DeployResponseDocSize}[m.Dir]; len(doc) != want {
			t.Errorf("deploy %s document: %d bytes, want %d", m.Dir, len(doc), want)
		}
	}
	// Lai: the simple request is Content-Length 438 for Melbourne; the
	// detailed response spans several 1460-byte TCP segments.
	for _, n := range sizes("weather-simple", 40)["getTemperature"] {
		if n < 420 || n > 460 {
			t.Errorf("weather simple request %d bytes, want about 438", n)
		}
	}
	for _, n := range sizes("weather-detailed", 40)["getWeatherReportResponse"] {
		if n < 1460 || n > 4000 {
			t.Errorf("weather detailed response %d bytes, want 1460-4000", n)
		}
	}
	// Kohlhoff: 1-10 entries, 639 bytes + 386.9 bytes per entry.
	for _, m := range Family("fixml", 40, DefaultSeed) {
		if m.Dir != Request {
			continue
		}
		k := bytes.Count(m.Body, []byte("<MDIncGroup>"))
		want := 639 + 386.9*float64(k)
		if k < 1 || k > 10 || float64(len(m.Body)) < 0.9*want || float64(len(m.Body)) > 1.15*want {
			t.Errorf("fixml: %d entries in %d bytes, paper model %.0f", k, len(m.Body), want)
		}
	}
	// Tere: 300-830 rows, 830 rows about 454 KB (547 bytes a row).
	for _, m := range Family("northwind", 4, DefaultSeed) {
		if m.Dir != Response {
			continue
		}
		rows := bytes.Count(m.Body, []byte("<Orders diffgr:id="))
		perRow := float64(len(m.Body)) / float64(rows)
		if rows < 300 || rows > 830 || perRow < 480 || perRow > 620 {
			t.Errorf("northwind: %d rows in %d bytes", rows, len(m.Body))
		}
	}
	big := Family("edge", DefaultN("edge"), DefaultSeed)
	last := big[len(big)-1]
	if !IsBig(last) || len(last.Body) < 2<<20 || len(last.Body) > 2<<20+8192 {
		t.Errorf("big doubles: %s %d bytes", last.Name, len(last.Body))
	}
}

func TestChargingOps(t *testing.T) {
	seen := map[string]bool{}
	for _, m := range Family("charging", 400, DefaultSeed) {
		seen[m.Name] = true
	}
	for _, op := range []string{"credit", "directDebit", "reserve", "debitReservation", "releaseReservation", "creditControl", "confirm", "alert"} {
		if !seen[op] {
			t.Errorf("charging: no %s in 400 messages", op)
		}
	}
}

// TestCorpusUpToDate fails when testdata/corpus differs from what the
// generator produces; regenerate with go run ./internal/trafficgen/cmd/gen.
func TestCorpusUpToDate(t *testing.T) {
	root := filepath.Join("..", "..", "testdata", "corpus")
	want := Corpus(0, DefaultSeed, false)
	total := 0
	for name, body := range want {
		got, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil {
			t.Errorf("%v (regenerate: go run ./internal/trafficgen/cmd/gen -out testdata/corpus)", err)
			continue
		}
		if !bytes.Equal(got, body) {
			t.Errorf("%s is stale (regenerate: go run ./internal/trafficgen/cmd/gen -out testdata/corpus)", name)
		}
		total += len(body)
	}
	if total > 3<<20 {
		t.Errorf("committed corpus is %d bytes, keep it under 3 MB", total)
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if _, ok := want[filepath.ToSlash(rel)]; !ok {
			t.Errorf("%s: not produced by the generator", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
