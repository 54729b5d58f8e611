package layers

import (
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// productFiles calls visit for every non-test .go file of the repository,
// by its path, skipping hidden folders, testdata and the folders skip names
// (relative to the repository root, such as "testsupport/testenv").
func productFiles(t *testing.T, visit func(p, rel string), skip ...string) {
	t.Helper()
	root := testenv.RepoRoot(t)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			for _, s := range skip {
				if rel == filepath.FromSlash(s) {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			visit(p, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
