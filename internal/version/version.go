// Package version is the one place kpreload's version comes from: `kpreload
// --version`, the Packer plugin's `describe` and the manifests of the images
// it builds all read it here.
//
// The release is Release, or what the linker sets (-ldflags "-X
// github.com/kpreload/kpreload/internal/version.release=1.2.3"), or the
// module's version when the binary was built with `go install …@vX.Y.Z`. The
// commit is what the linker sets (…/internal/version.commit, as make build
// does), else the VCS revision Go stamps into the binary.
package version

import (
	"fmt"
	"runtime/debug"
	"strings"

	"golang.org/x/mod/module"
)

// Release is the version this source tree is released as (semantic version,
// no leading v). Bump it when tagging a release.
const Release = "0.2.0"

// release and commit are what the linker may set (make build sets commit:
// Go's own VCS stamp is off wherever GOFLAGS has -buildvcs=false).
var release, commit = "", ""

// Info is a binary's version, commit and Go version.
type Info struct {
	// Version is the semantic version, such as "0.2.0" (no leading v).
	Version string `json:"version"`
	// Commit is the VCS revision (12 hex digits, "+dirty" for a modified
	// tree), or "" when the binary carries none.
	Commit string `json:"commit,omitempty"`
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string `json:"go"`
}

// Get returns this binary's Info.
func Get() Info {
	info, ok := debug.ReadBuildInfo()
	i := fromBuild(info, ok, release)
	if commit != "" {
		i.Commit = commit
	}
	return i
}

// fromBuild is Get for a given build info and linker-set release.
func fromBuild(info *debug.BuildInfo, ok bool, linked string) Info {
	out := Info{Version: Release}
	if ok {
		out.GoVersion = info.GoVersion
		if v := info.Main.Version; v != "" && v != "(devel)" && !module.IsPseudoVersion(v) {
			// A tagged module version (go install …@v1.2.3); pseudo-versions
			// (v0.0.0-2026…-abcdef) name no release.
			out.Version = strings.TrimPrefix(v, "v")
		}
		var rev, dirty string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "+dirty"
				}
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" {
			out.Commit = rev + dirty
		}
	}
	if linked != "" {
		out.Version = strings.TrimPrefix(linked, "v")
	}
	return out
}

// Version returns the semantic version alone.
func Version() string { return Get().Version }

// String is the one-line form `kpreload --version` prints:
// "kpreload 0.2.0 (commit 0123456789ab, go1.26.8)".
func (i Info) String() string {
	commit := i.Commit
	if commit == "" {
		commit = "unknown"
	}
	return fmt.Sprintf("kpreload %s (commit %s, %s)", i.Version, commit, i.GoVersion)
}
