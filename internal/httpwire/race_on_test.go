//go:build race

package httpwire_test

// raceEnabled: the race detector makes sync.Pool drop items, so allocation counts vary.
const raceEnabled = true
