package recipe

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/internal/inroot"
)

// SharedArchivesFile is the file, beside the recipes, that names extra apt
// archives every recipe of its directory may use, as if each recipe's own
// archives: listed them (a recipe's own archive of the same name takes its
// place). Its one field is archives:, a list of archive.Extra; key paths are
// relative to the file and stay inside its directory (confineKey). LoadDir
// does not read it as a recipe.
const SharedArchivesFile = "archives.yaml"

// sharedArchives reads dir's SharedArchivesFile: nil when there is none, an
// error naming the file, the line and the field when it is bad.
func sharedArchives(dir string) ([]archive.Extra, error) {
	file := filepath.Join(dir, SharedArchivesFile)
	if _, err := os.Lstat(file); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	data, err := inroot.ReadPath(file, MaxFile)
	if err != nil {
		return nil, fmt.Errorf("read shared archives: %w", err)
	}
	var doc struct {
		Archives []archive.Extra `yaml:"archives"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, &Error{File: file, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	// Each item's line, for the errors.
	var lines, keyLines []int
	var root yaml.Node
	if yaml.Unmarshal(data, &root) == nil && len(root.Content) == 1 {
		m := root.Content[0]
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == "archives" {
				for _, item := range m.Content[i+1].Content {
					lines = append(lines, item.Line)
					keyLine := item.Line
					for j := 0; j+1 < len(item.Content); j += 2 {
						if item.Content[j].Value == "key" {
							keyLine = item.Content[j].Line
						}
					}
					keyLines = append(keyLines, keyLine)
				}
			}
		}
	}
	var errs []error
	seen := map[string]int{}
	for i, x := range doc.Archives {
		line := 0
		if i < len(lines) {
			line = lines[i]
		}
		field := fmt.Sprintf("archives[%d]", i)
		if err := x.Check(); err != nil {
			for _, e := range strings.Split(err.Error(), "\n") {
				f, msg, _ := strings.Cut(e, ": ")
				errs = append(errs, &Error{File: file, Line: line, Field: field + "." + f, Msg: msg})
			}
		}
		if j, ok := seen[x.Name]; ok {
			errs = append(errs, &Error{File: file, Line: line, Field: field + ".name", Msg: fmt.Sprintf("%s is used twice (also archives[%d])", x.Name, j)})
		}
		seen[x.Name] = i
		if x.Key != "" {
			keyLine := line
			if i < len(keyLines) {
				keyLine = keyLines[i]
			}
			p, data, err := confineKey(dir, x.Key)
			if err != nil {
				errs = append(errs, &Error{File: file, Line: keyLine, Field: field + ".key", Msg: err.Error()})
			}
			doc.Archives[i].Key, doc.Archives[i].KeyData = p, data
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return doc.Archives, nil
}

// addShared adds the shared archives of r's directory that r does not name
// itself.
func (r *Recipe) addShared() error {
	shared, err := sharedArchives(filepath.Dir(r.File))
	if err != nil {
		return err
	}
	for _, x := range shared {
		if _, own := r.extra(x.Name); !own {
			r.Archives = append(r.Archives, x)
		}
	}
	return nil
}
