package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ByteSize is a number of bytes. In YAML it is an integer, or a string with
// an optional unit: "512", "512B", "64KiB", "32MiB", "1GiB", "1TiB" (powers
// of 1024) or "10KB", "10MB", "1GB", "1TB" (powers of 1000). Units are
// case-insensitive and may be separated from the number by spaces;
// fractions are rejected. It marshals as the shortest exact IEC form.
type ByteSize int64

// Byte size units.
const (
	B   ByteSize = 1
	KiB ByteSize = 1 << 10
	MiB ByteSize = 1 << 20
	GiB ByteSize = 1 << 30
	TiB ByteSize = 1 << 40

	KB ByteSize = 1e3
	MB ByteSize = 1e6
	GB ByteSize = 1e9
	TB ByteSize = 1e12
)

var byteUnits = []struct {
	name string
	size ByteSize
}{
	{"B", B},
	{"KiB", KiB}, {"MiB", MiB}, {"GiB", GiB}, {"TiB", TiB},
	{"KB", KB}, {"MB", MB}, {"GB", GB}, {"TB", TB},
}

// iecUnits are tried largest first when formatting.
var iecUnits = []struct {
	name string
	size ByteSize
}{{"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}}

// errNegativeSize is returned for sizes below zero; the decoder words it
// as a field error.
var errNegativeSize = errors.New("must not be negative")

// ParseByteSize parses a size such as "512", "64KiB" or "10MB".
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	if strings.HasPrefix(t, "-") {
		return 0, fmt.Errorf("size %q: %w", s, errNegativeSize)
	}
	t = strings.TrimPrefix(t, "+")
	end := 0
	for end < len(t) && t[end] >= '0' && t[end] <= '9' {
		end++
	}
	if end == 0 {
		return 0, fmt.Errorf("invalid size %q: want a whole number of bytes with an optional unit, e.g. \"64KiB\"", s)
	}
	if end < len(t) && t[end] == '.' {
		return 0, fmt.Errorf("invalid size %q: fractions are not supported, use a smaller unit", s)
	}
	n, err := strconv.ParseInt(t[:end], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	unit := strings.TrimSpace(t[end:])
	mult := B
	if unit != "" {
		found := false
		for _, u := range byteUnits {
			if strings.EqualFold(unit, u.name) {
				mult, found = u.size, true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("invalid size %q: unknown unit %q (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)", s, unit)
		}
	}
	if n > math.MaxInt64/int64(mult) {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return ByteSize(n) * mult, nil
}

// String returns the shortest exact IEC form ("32MiB"), or the plain number
// of bytes when no IEC unit divides it.
func (b ByteSize) String() string {
	if b != 0 {
		for _, u := range iecUnits {
			if b%u.size == 0 {
				return strconv.FormatInt(int64(b/u.size), 10) + u.name
			}
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// MarshalYAML writes the IEC form as a string, or a plain integer when no
// IEC unit divides the size.
func (b ByteSize) MarshalYAML() (any, error) {
	s := b.String()
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	return s, nil
}
