package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestExpandEnv(t *testing.T) {
	env := map[string]string{"HOST": "db1", "EMPTY": "", "PORT": "5432"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "plain", want: "plain"},
		{in: "${HOST}", want: "db1"},
		{in: "${HOST}:${PORT}", want: "db1:5432"},
		{in: "x${HOST}y", want: "xdb1y"},
		{in: "${UNSET:-fallback}", want: "fallback"},
		{in: "${UNSET:-}", want: ""},
		{in: "${HOST:-fallback}", want: "db1"},
		{in: "${EMPTY:-fallback}", want: "fallback"},
		{in: "${EMPTY}", want: ""},
		{in: "${UNSET:-a:-b}", want: "a:-b"},
		{in: "${UNSET:-${HOST}}", wantErr: "nested ${ in the default of ${UNSET:-...} is not supported"},
		{in: "$$", want: "$"},
		{in: "$${HOST}", want: "${HOST}"},
		{in: "pa$word", want: "pa$word"},
		{in: "cost: 5$", want: "cost: 5$"},
		{in: "$$$$", want: "$$"},
		{in: "${UNSET}", wantErr: "environment variable UNSET is not set (use ${UNSET:-default} to give a default)"},
		{in: "${HOST", wantErr: `unterminated ${ in "${HOST" (write $$ for a literal dollar)`},
		{in: "${}", wantErr: `invalid environment variable name "" in ${}`},
		{in: "${1A}", wantErr: `invalid environment variable name "1A" in ${1A}`},
		{in: "${A-B}", wantErr: `invalid environment variable name "A-B" in ${A-B}`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := expandEnv(tt.in, lookup)
			if tt.wantErr != "" {
				require.EqualError(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}
