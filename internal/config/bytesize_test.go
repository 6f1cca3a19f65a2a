package config

import (
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

func TestParseByteSize(t *testing.T) {
	tests := []struct {
		in      string
		want    ByteSize
		wantErr string
	}{
		{in: "0", want: 0},
		{in: "512", want: 512},
		{in: "512B", want: 512},
		{in: "64KiB", want: 64 << 10},
		{in: "64 kib", want: 64 << 10},
		{in: "32MiB", want: 32 << 20},
		{in: "1GiB", want: 1 << 30},
		{in: "2TiB", want: 2 << 40},
		{in: "10MB", want: 10_000_000},
		{in: "1KB", want: 1000},
		{in: "3GB", want: 3_000_000_000},
		{in: "1TB", want: 1_000_000_000_000},
		{in: " 7 ", want: 7},
		{in: "+7", want: 7},
		{in: "", wantErr: `invalid size "": want a whole number of bytes with an optional unit, e.g. "64KiB"`},
		{in: "KiB", wantErr: `invalid size "KiB": want a whole number of bytes with an optional unit, e.g. "64KiB"`},
		{in: "1.5MiB", wantErr: `invalid size "1.5MiB": fractions are not supported, use a smaller unit`},
		{in: "12XB", wantErr: `invalid size "12XB": unknown unit "XB" (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)`},
		{in: "-1", wantErr: `size "-1": must not be negative`},
		{in: "9223372036854775808", wantErr: `invalid size "9223372036854775808": too large`},
		{in: "8388608TiB", wantErr: `invalid size "8388608TiB": too large`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseByteSize(tt.in)
			if tt.wantErr != "" {
				require.EqualError(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestByteSizeString(t *testing.T) {
	tests := []struct {
		in   ByteSize
		want string
	}{
		{0, "0"},
		{1, "1"},
		{1000, "1000"},
		{1024, "1KiB"},
		{1536, "1536"},
		{3 * KiB, "3KiB"},
		{1025 * KiB, "1025KiB"},
		{32 * MiB, "32MiB"},
		{1024 * MiB, "1GiB"},
		{5 * TiB, "5TiB"},
		{1024 * TiB, "1024TiB"},
		{10 * MB, "10000000"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			require.Equal(t, tt.want, tt.in.String())
			back, err := ParseByteSize(tt.in.String())
			require.NoError(t, err)
			require.Equal(t, tt.in, back)
		})
	}
}

func TestByteSizeMarshalYAML(t *testing.T) {
	out, err := yaml.Marshal(map[string]ByteSize{"a": 64 * KiB, "b": 10 * MB, "c": 0})
	require.NoError(t, err)
	require.Equal(t, "a: 64KiB\nb: 10000000\nc: 0\n", string(out))
}
