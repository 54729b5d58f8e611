package archive

import (
	"context"
	"slices"
	"strings"
)

// CarriedAll is Carried for several packages with one apt-cache call: the
// versions of each name (a name the archive lacks has none).
func (a *Archive) CarriedAll(ctx context.Context, names ...string) (map[string][]Carried, error) {
	got := map[string][]Carried{}
	if len(names) == 0 {
		return got, nil
	}
	out, err := a.aptCache(ctx, append([]string{"madison"}, names...)...)
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(line, "|")
		name := ""
		if len(f) >= 3 {
			name = strings.TrimSpace(f[0])
		}
		if !slices.Contains(names, name) {
			continue
		}
		c := Carried{Version: strings.TrimSpace(f[1])}
		if w := strings.Fields(f[2]); len(w) >= 2 {
			c.Suite, _, _ = strings.Cut(w[1], "/")
			c.Published = a.releaseDate(w[0], c.Suite)
		}
		if c.Version != "" && !slices.Contains(got[name], c) {
			got[name] = append(got[name], c)
		}
	}
	return got, nil
}
