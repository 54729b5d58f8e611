package archive

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// ReleaseDates returns the Date of the Release file of every source the
// suite's private configuration reads (SourcesList: the suite and its
// -updates, -security and -backports pockets), as "suite=date" words in that
// order, after Update: it changes when the archive publishes any of them
// again, so it keys what was installed from the suite (a root filesystem
// made from it, say). A source whose Release file the lists lack is an error.
func (a *Archive) ReleaseDates(ctx context.Context) (string, error) {
	if err := a.Update(ctx, false); err != nil {
		return "", err
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(a.SourcesList()), "\n") {
		f := strings.Fields(l)
		i := 1 // past "deb"
		for i < len(f) && strings.HasPrefix(f[i], "[") {
			for i < len(f) && !strings.HasSuffix(f[i], "]") {
				i++
			}
			i++
		}
		if i+1 >= len(f) {
			return "", fmt.Errorf("archive %s: sources line %q names no URI and suite", a.Suite, l)
		}
		uri, suite := f[i], f[i+1]
		d := a.releaseDate(uri, suite)
		if d.IsZero() {
			return "", fmt.Errorf("archive %s: no Release file of %s %s in the lists of %s", a.Suite, uri, suite, a.Dir)
		}
		out = append(out, suite+"="+d.UTC().Format(time.RFC3339))
	}
	return strings.Join(out, " "), nil
}
