package trafficgen

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/xml"
	"slices"
	"testing"
)

// getDocumentResult is the part of a GetDocument response the tests read.
type getDocumentResult struct {
	Result struct {
		Length  int    `xml:"Length"`
		Content string `xml:"Content"`
	} `xml:"Body>GetDocumentResponse>GetDocumentResult"`
}

func TestAttachmentFamilies(t *testing.T) {
	for _, tc := range []struct {
		family           string
		n                int
		minResp, maxResp int
	}{
		{"attachment-200k", 16, 190_000, 210_000},
		{"attachment-2m", 4, 1_900_000, 2_100_000},
	} {
		t.Run(tc.family, func(t *testing.T) {
			ms := Family(tc.family, tc.n, DefaultSeed)
			if len(ms) != tc.n {
				t.Fatalf("%d messages, want %d", len(ms), tc.n)
			}
			again := Family(tc.family, tc.n, DefaultSeed)
			other := Family(tc.family, tc.n, DefaultSeed+1)
			seen := map[string]bool{}
			for i, m := range ms {
				if m.Family != tc.family {
					t.Errorf("[%d]: family %q", i, m.Family)
				}
				if !bytes.Equal(m.Body, again[i].Body) {
					t.Errorf("[%d]: differs between two runs with the same seed", i)
				}
				if bytes.Equal(m.Body, other[i].Body) {
					t.Errorf("[%d]: the same for seeds %d and %d", i, DefaultSeed, DefaultSeed+1)
				}
				if seen[string(m.Body)] {
					t.Errorf("[%d] %s: the same as an earlier message", i, m.Dir)
				}
				seen[string(m.Body)] = true
				if err := wellFormed(m.Body); err != nil {
					t.Errorf("[%d] %s: %v", i, m.Name, err)
				}
				switch m.Dir {
				case Request:
					if m.Name != "GetDocument" || len(m.Body) < 380 || len(m.Body) > 480 {
						t.Errorf("[%d]: request %s of %d bytes, want GetDocument of about 430", i, m.Name, len(m.Body))
					}
				case Response:
					if m.Name != "GetDocumentResponse" || len(m.Body) < tc.minResp || len(m.Body) > tc.maxResp {
						t.Errorf("[%d]: response %s of %d bytes, want %d-%d", i, m.Name, len(m.Body), tc.minResp, tc.maxResp)
					}
					checkDocument(t, i, m.Body)
				}
			}
		})
	}
}

// checkDocument decodes a response's content and checks that it has the
// length the response states, and that gzip takes less than 30 % off the
// response: the base64 is all there is to gain.
func checkDocument(t *testing.T, i int, body []byte) {
	t.Helper()
	var r getDocumentResult
	if err := xml.Unmarshal(body, &r); err != nil {
		t.Errorf("[%d]: %v", i, err)
		return
	}
	doc, err := base64.StdEncoding.DecodeString(r.Result.Content)
	if err != nil || len(doc) != r.Result.Length {
		t.Errorf("[%d]: content of %d bytes (%v), Length says %d", i, len(doc), err, r.Result.Length)
	}
	var z bytes.Buffer
	w, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
	w.Write(body)
	w.Close()
	if saved := 1 - float64(z.Len())/float64(len(body)); saved >= 0.30 {
		t.Errorf("[%d]: gzip takes %.1f %% off %d bytes, want < 30 %% (incompressible content)", i, 100*saved, len(body))
	}
}

// Every family Family knows is in Families, AttachmentFamilies or LargeFamilies, once.
func TestFamilyLists(t *testing.T) {
	all := append(slices.Concat(Families, AttachmentFamilies), LargeFamilies...)
	for name := range generators {
		if !slices.Contains(all, name) {
			t.Errorf("%s: in none of Families, AttachmentFamilies, LargeFamilies", name)
		}
	}
	for _, name := range all {
		if generators[name] == nil {
			t.Errorf("%s: listed, but Family does not know it", name)
		}
	}
	slices.Sort(all)
	if n := len(all); len(slices.Compact(all)) != n {
		t.Errorf("a family is listed twice: %v", all)
	}
}

// Generating a 2 MB response is linear: one allocation of its size, no
// string building.
func BenchmarkAttachment2M(b *testing.B) {
	b.ReportAllocs()
	var n int
	for b.Loop() {
		for _, m := range Family("attachment-2m", 2, DefaultSeed) {
			n += len(m.Body)
		}
	}
	b.SetBytes(int64(n / b.N))
}
