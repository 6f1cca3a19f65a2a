package trafficgen

import (
	"fmt"
	"os"
	"path/filepath"
)

// FileName is the corpus file name of the i-th message of a family.
func FileName(i int, m Message) string { return fmt.Sprintf("%04d-%s.xml", i, m.Dir) }

// Corpus returns the committed corpus: for every family, its messages for
// DefaultN and DefaultSeed, keyed by "<family>/NNNN-<dir>.xml", without
// the big message unless big is set.
func Corpus(n int, seed int64, big bool) map[string][]byte {
	files := map[string][]byte{}
	for _, f := range Families {
		k := n
		if k <= 0 {
			k = DefaultN(f)
		}
		for i, m := range Family(f, k, seed) {
			if IsBig(m) && !big {
				continue
			}
			files[f+"/"+FileName(i, m)] = m.Body
		}
	}
	return files
}

// WriteCorpus writes files (as from Corpus) under dir, replacing each
// family directory so no stale files remain.
func WriteCorpus(dir string, files map[string][]byte) error {
	for _, f := range Families {
		if err := os.RemoveAll(filepath.Join(dir, f)); err != nil {
			return err
		}
	}
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, body, 0o644); err != nil {
			return err
		}
	}
	return nil
}
