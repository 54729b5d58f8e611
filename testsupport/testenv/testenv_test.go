package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRepoRoot: the root is found the same whether the test binary was built
// with -trimpath (as `make unit` and `make test` build it) or not: an absolute
// directory above this package's, whose go.mod is kpreload's.
func TestRepoRoot(t *testing.T) {
	got := RepoRoot(t)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Dir(filepath.Dir(wd)); got != want { // testsupport/testenv
		t.Errorf("RepoRoot() = %q, want %q", got, want)
	}
	mod, err := os.ReadFile(filepath.Join(got, "go.mod"))
	if err != nil {
		t.Fatalf("RepoRoot() = %q: %v", got, err)
	}
	if first, _, _ := strings.Cut(string(mod), "\n"); first != "module github.com/kpreload/kpreload" {
		t.Errorf("%s/go.mod starts %q, want kpreload's module", got, first)
	}
}
