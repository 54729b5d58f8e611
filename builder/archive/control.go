package archive

import (
	"bytes"
	"context"
	"strings"
)

// Control is the part of a package's control record that decides whether it
// can go into an image: its name and the package names (without versions)
// its Provides, Conflicts and Breaks fields list.
type Control struct {
	Package   string
	Provides  []string
	Conflicts []string
}

// Controls returns the control record of the candidate version of each of
// names the suite carries (apt-cache show --no-all-versions, one call);
// names the suite lacks are absent from the map.
func (a *Archive) Controls(ctx context.Context, names ...string) (map[string]Control, error) {
	versions, err := a.VersionsOf(ctx, names...)
	if err != nil {
		return nil, err
	}
	var carried []string
	for _, n := range names {
		if len(versions[n]) > 0 {
			carried = append(carried, n)
		}
	}
	got := map[string]Control{}
	if len(carried) == 0 {
		return got, nil
	}
	out, err := a.aptCache(ctx, append([]string{"show", "--no-all-versions"}, carried...)...)
	if err != nil {
		return nil, err
	}
	for _, c := range ParseControls(out) {
		if _, seen := got[c.Package]; !seen {
			got[c.Package] = c
		}
	}
	return got, nil
}

// ParseControls reads control records (apt-cache show, a Packages index),
// keeping Package, Provides and Conflicts/Breaks as package names.
func ParseControls(out []byte) []Control {
	var all []Control
	for _, para := range bytes.Split(out, []byte("\n\n")) {
		var c Control
		field := ""
		fields := map[string]string{}
		for _, line := range strings.Split(string(para), "\n") {
			if line == "" {
				continue
			}
			if line[0] == ' ' || line[0] == '\t' {
				if field != "" {
					fields[field] += " " + strings.TrimSpace(line)
				}
				continue
			}
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				field = ""
				continue
			}
			field = k
			fields[k] = strings.TrimSpace(v)
		}
		c.Package = fields["Package"]
		if c.Package == "" {
			continue
		}
		c.Provides = relationNames(fields["Provides"])
		c.Conflicts = append(relationNames(fields["Conflicts"]), relationNames(fields["Breaks"])...)
		all = append(all, c)
	}
	return all
}

// relationNames returns the package names of a relation field
// ("a (>= 1), b | c [amd64]"), without versions, alternatives kept apart.
func relationNames(field string) []string {
	var names []string
	for _, part := range strings.FieldsFunc(field, func(r rune) bool { return r == ',' || r == '|' }) {
		if f := strings.Fields(part); len(f) > 0 {
			name, _, _ := strings.Cut(f[0], ":") // name:any
			names = append(names, name)
		}
	}
	return names
}
