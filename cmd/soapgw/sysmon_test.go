package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestQuietSysmonEnv(t *testing.T) {
	for _, tc := range []struct {
		name   string
		env    []string
		want   []string
		change bool
	}{
		{"no GODEBUG", []string{"PATH=/bin"}, []string{"PATH=/bin", "GODEBUG=" + quietSysmonSetting}, true},
		{"empty GODEBUG", []string{"GODEBUG=", "A=b"}, []string{"A=b", "GODEBUG=" + quietSysmonSetting}, true},
		{"other settings kept in order", []string{"GODEBUG=gctrace=1,madvdontneed=0"},
			[]string{"GODEBUG=gctrace=1,madvdontneed=0," + quietSysmonSetting}, true},
		{"two GODEBUG entries merged", []string{"GODEBUG=gctrace=1", "X=y", "GODEBUG=http2debug=1"},
			[]string{"X=y", "GODEBUG=gctrace=1,http2debug=1," + quietSysmonSetting}, true},
		{"operator's schedtrace kept", []string{"GODEBUG=gctrace=1,schedtrace=0"}, []string{"GODEBUG=gctrace=1,schedtrace=0"}, false},
		{"already quiet", []string{"GODEBUG=" + quietSysmonSetting}, []string{"GODEBUG=" + quietSysmonSetting}, false},
		{"scheddetail is not schedtrace", []string{"GODEBUG=scheddetail=1"},
			[]string{"GODEBUG=scheddetail=1," + quietSysmonSetting}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, change := quietSysmonEnv(tc.env)
			assert.Equal(t, tc.change, change)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestRunsGateway(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"run", "--config", "x.yaml"}, true},
		{[]string{"--log-level", "warn", "run", "--config", "x.yaml"}, true},
		{[]string{"demo"}, false},
		{[]string{"bench", "cpu"}, false},
		{[]string{"config", "check", "run"}, false},
		{[]string{}, false},
		{[]string{"no-such-command"}, false},
	} {
		assert.Equal(t, tc.want, runsGateway(tc.args), "%q", tc.args)
	}
}
