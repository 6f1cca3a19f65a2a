//go:build race

package codec

// raceEnabled reports whether the tests run under the race detector, which slows the
// codecs tenfold: tests that measure rather than check skip themselves.
const raceEnabled = true
