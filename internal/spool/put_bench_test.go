package spool

import (
	"path/filepath"
	"testing"
)

// BenchmarkPut is the cost of acknowledging a one-way message: a 1 KiB message synced to
// disk, by one client at a time (sequential) and by many (parallel: group commits).
func BenchmarkPut(b *testing.B) {
	msg := make([]byte, 1024)
	build := func(id string) []byte { return append([]byte(id), msg...) }
	for _, mode := range []string{"sequential", "parallel"} {
		b.Run(mode, func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "spool.db"), Limits{MaxMessages: 1 << 30, MaxBytes: 1 << 40})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			if mode == "sequential" {
				for b.Loop() {
					if _, err := s.Put("p", "u", build); err != nil {
						b.Fatal(err)
					}
				}
				return
			}
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := s.Put("p", "u", build); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
