package stage

import (
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// unitDirs are the directories of a staged tree whose unit files are enabled
// on the target.
var unitDirs = []string{"lib/systemd/system", "usr/lib/systemd/system", "etc/systemd/system"}

// UnitName returns the name of the systemd unit to enable for the file rel
// (slash-separated, relative to a staged tree's top), and whether it is one:
// a .service, .target, .timer, .path or .socket file directly in a unit
// directory, not a template (no "@"). The Packer provisioner and "kpreload
// install --stage" enable exactly these units of what Stage wrote.
func UnitName(rel string) (string, bool) {
	rel = strings.TrimPrefix(path.Clean("/"+rel), "/")
	if !slices.Contains(unitDirs, path.Dir(rel)) {
		return "", false
	}
	name := path.Base(rel)
	if strings.Contains(name, "@") {
		return "", false
	}
	for _, ext := range []string{".service", ".target", ".timer", ".path", ".socket"} {
		if strings.HasSuffix(name, ext) {
			return name, true
		}
	}
	return "", false
}

// Units returns the systemd units to enable (UnitName) among the regular
// files of the staged tree at dir, sorted, each once.
func Units(dir string) ([]string, error) {
	var units []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if u, ok := UnitName(filepath.ToSlash(rel)); ok {
			units = append(units, u)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(units)
	return slices.Compact(units), nil
}
