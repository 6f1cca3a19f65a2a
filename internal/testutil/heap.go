package testutil

import "runtime"

// HeapAlloc returns the bytes of live heap objects after two collections (the second
// frees what the first's finalizers released): what tests that bound the memory an
// exchange leaves behind compare before and after.
func HeapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
