package layers

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// mapEntry is a line of docs/layout.md's "Every package" list: "- `path` — what it does".
var mapEntry = regexp.MustCompile("(?m)^- `([a-z0-9_/.-]+)` — ")

// TestLayoutNamesEveryPackage holds docs/layout.md to the tree: every
// folder with Go files (test-only packages included) is named once in its
// "Every package" list, and every name there is such a folder.
func TestLayoutNamesEveryPackage(t *testing.T) {
	root := testenv.RepoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "layout.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, list, ok := strings.Cut(string(doc), "\n## Every package\n")
	if !ok {
		t.Fatal(`docs/layout.md has no "## Every package" section`)
	}
	named := map[string]int{}
	for _, m := range mapEntry.FindAllStringSubmatch(list, -1) {
		named[m[1]]++
	}
	var pkgs []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if dir := filepath.ToSlash(filepath.Dir(rel)); strings.HasSuffix(p, ".go") && dir != "." && !slices.Contains(pkgs, dir) {
			pkgs = append(pkgs, dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 50 {
		t.Fatalf("found %d packages under %s: the walk is wrong", len(pkgs), root)
	}
	for _, p := range pkgs {
		switch named[p] {
		case 0:
			t.Errorf("package %s is not in docs/layout.md's \"Every package\" list: add the line \"- `%s` — what it does\"", p, p)
		case 1:
		default:
			t.Errorf("package %s is named %d times in docs/layout.md's list", p, named[p])
		}
	}
	for name := range named {
		if !slices.Contains(pkgs, name) {
			t.Errorf("docs/layout.md names %s, which is no package of the repository", name)
		}
	}
}

// TestMainsUnderCmd checks that every command is a folder of cmd/: a file
// of package main anywhere else (test fixtures under testdata/ aside) fails,
// so docs/layout.md's Commands list is the whole list of programs built
// from the repository.
func TestMainsUnderCmd(t *testing.T) {
	fset := token.NewFileSet()
	mains := 0
	productFiles(t, func(p, rel string) {
		f, err := parser.ParseFile(fset, p, nil, parser.PackageClauseOnly)
		if err != nil {
			t.Fatalf("parse %s: %v", p, err)
		}
		if f.Name.Name != "main" {
			return
		}
		mains++
		if !strings.HasPrefix(filepath.ToSlash(rel), "cmd/") {
			t.Errorf("%s is a command (package main) outside cmd/: move its folder to cmd/NAME", rel)
		}
	})
	if mains < 5 {
		t.Fatalf("found %d files of package main: the walk is wrong", mains)
	}
}
