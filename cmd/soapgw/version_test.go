package main

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestVersionNamesTheCommit(t *testing.T) {
	rev := debug.BuildSetting{Key: "vcs.revision", Value: "e2a1c158aa2ac96bd47007ece285035579a464dd"}
	for _, tc := range []struct {
		settings []debug.BuildSetting
		want     string
	}{
		{nil, "dev"},
		{[]debug.BuildSetting{rev}, "dev+e2a1c158aa2a"},
		{[]debug.BuildSetting{rev, {Key: "vcs.modified", Value: "false"}}, "dev+e2a1c158aa2a"},
		{[]debug.BuildSetting{{Key: "vcs.modified", Value: "true"}, rev}, "dev+e2a1c158aa2a-modified"},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}}, "dev"}, // not a commit id
	} {
		require.Equal(t, tc.want, versionWith("dev", tc.settings))
	}
}
