// What a failed build says: its kept log and its first compiler error.

package matrix

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/builder/dkms"
	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/kmodcache/tiered"
)

// firstError is the line a failed cell shows: the compiler's first error
// line, the first error line the registry recorded, or the error's text.
func firstError(err error) string {
	var be *dkms.BuildError
	if errors.As(err, &be) && be.FirstError != "" {
		return trimWorkPath(be.FirstError)
	}
	var fe *tiered.FailedError
	if errors.As(err, &fe) {
		return fe.FirstError
	}
	return err.Error()
}

// trimWorkPath shortens compiler messages that name files in the build
// directory of dkms's tree in the sandbox
// ("/var/lib/dkms/<name>/<version>/build/x.c:1:2: error:") to the path
// inside the package source ("x.c:1:2: error:").
func trimWorkPath(line string) string {
	i := strings.Index(line, dkms.SandboxDKMSTree+"/")
	if i < 0 {
		return line
	}
	rest := line[i:]
	end := strings.IndexAny(rest, " \t:")
	if end < 0 {
		end = len(rest)
	}
	j := strings.LastIndex(rest[:end], "/build/")
	if j < 0 {
		return line
	}
	return line[:i] + rest[j+len("/build/"):]
}

// keepLog copies a build log into the log directory as
// <recipe>_<kernel>.log and returns the copy's path; when that fails it
// returns the original path (which disappears with the work directory).
func (r *runner) keepLog(c Cell, log string) string {
	if log == "" {
		return ""
	}
	if err := os.MkdirAll(r.opts.LogDir, 0o755); err != nil {
		return log
	}
	dst := filepath.Join(r.opts.LogDir, c.Recipe.Name+"_"+c.Kernel+".log")
	if err := fileutil.CopyFile(log, dst, 0o644); err != nil {
		return log
	}
	return dst
}
