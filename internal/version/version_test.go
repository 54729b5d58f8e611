package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuild(t *testing.T) {
	rev := func(r, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs.revision", Value: r}, {Key: "vcs.modified", Value: modified}}
	}
	for _, tc := range []struct {
		name   string
		info   *debug.BuildInfo
		ok     bool
		linked string
		want   Info
	}{
		{"no build info", nil, false, "", Info{Version: Release}},
		{"checkout", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: rev("0123456789abcdef0123", "false")}, true, "",
			Info{Version: Release, Commit: "0123456789ab", GoVersion: "go1.26.8"}},
		{"modified checkout", &debug.BuildInfo{GoVersion: "go1.26.8", Settings: rev("0123456789abcdef", "true")}, true, "",
			Info{Version: Release, Commit: "0123456789ab+dirty", GoVersion: "go1.26.8"}},
		{"go install of a tag", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.4.2"}}, true, "",
			Info{Version: "1.4.2", GoVersion: "go1.26.8"}},
		{"pseudo-version is no release", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261207010000-0123456789ab"}}, true, "",
			Info{Version: Release, GoVersion: "go1.26.8"}},
		{"linker wins", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.4.2"}}, true, "v1.5.0",
			Info{Version: "1.5.0", GoVersion: "go1.26.8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fromBuild(tc.info, tc.ok, tc.linked); got != tc.want {
				t.Errorf("fromBuild = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestString(t *testing.T) {
	for _, tc := range []struct {
		in   Info
		want string
	}{
		{Info{Version: "0.2.0", Commit: "0123456789ab", GoVersion: "go1.26.8"}, "kpreload 0.2.0 (commit 0123456789ab, go1.26.8)"},
		{Info{Version: "0.2.0", GoVersion: "go1.26.8"}, "kpreload 0.2.0 (commit unknown, go1.26.8)"},
	} {
		if got := tc.in.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}
