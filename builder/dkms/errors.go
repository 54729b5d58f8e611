package dkms

import (
	"errors"
	"fmt"
	"strings"
)

// ErrBuildExclusive reports that the package's BUILD_EXCLUSIVE_* directives
// exclude the kernel (dkms exit status 77): nothing to build, not a failure
// of the source. A matrix build can skip such a cell.
var ErrBuildExclusive = errors.New("dkms.conf BUILD_EXCLUSIVE directives exclude this kernel")

// BuildError is returned by Build when dkms ran and failed.
type BuildError struct {
	// Name and Version identify the dkms package.
	Name, Version string
	// Kernel is the kernel release the build was for.
	Kernel string
	// ExitCode is dkms's exit status.
	ExitCode int
	// LogPath is the most useful log: make.log when dkms got as far as make,
	// otherwise the captured dkms output.
	LogPath string
	// DKMSLogPath is the captured output of dkms itself.
	DKMSLogPath string
	// FirstError is the first error line of the log (see FirstError), or ""
	// when none was found.
	FirstError string
	// Err is the underlying cause: ErrBuildExclusive or the exit error.
	Err error
}

// Error describes the failure with its first error line and the log to read.
func (e *BuildError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "dkms build of %s/%s for kernel %s failed", e.Name, e.Version, e.Kernel)
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	if e.FirstError != "" {
		fmt.Fprintf(&b, ": %s", e.FirstError)
	}
	if e.LogPath != "" {
		fmt.Fprintf(&b, " (log: %s)", e.LogPath)
	}
	return b.String()
}

// Unwrap returns the underlying cause, so errors.Is(err, ErrBuildExclusive) works.
func (e *BuildError) Unwrap() error { return e.Err }

// firstErrorMarkers are tried in order; the first marker found anywhere in
// the log wins, and its first line is the answer. "error:" is what gcc and
// make print for compile errors ("file.c:3:1: error: ..."), "ERROR:" is
// modpost's ("ERROR: modpost: \"sym\" undefined!"), "Error!" is dkms's own,
// and "*** " is make's summary ("make[2]: *** [...] Error 1").
var firstErrorMarkers = []string{"error:", "ERROR:", "Error!", "*** "}

// FirstError returns the first line of a build log that reports an error, with
// surrounding blanks trimmed: the first line containing "error:" (compiler
// errors, including "fatal error:"), or if there is none the first with
// "ERROR:" (modpost), then "Error!" (dkms), then "*** " (make). It returns ""
// when the log has none of them.
func FirstError(log string) string {
	for _, marker := range firstErrorMarkers {
		for line := range strings.Lines(log) {
			if strings.Contains(line, marker) {
				return strings.TrimSpace(line)
			}
		}
	}
	return ""
}
