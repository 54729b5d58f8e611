package repocheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestThreatModelTestsExist: every test docs/threat-model.md names exists in
// the package it names, and every row saying what a party cannot do names
// one, so the page cannot go stale.
func TestThreatModelTestsExist(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "threat-model.md"))
	if err != nil {
		t.Fatal(err)
	}
	refs, probs := TableTests(string(doc))
	if len(refs) < 100 {
		t.Errorf("docs/threat-model.md names %d tests; want its every table read", len(refs))
	}
	for _, p := range append(probs, MissingTests(root, refs)...) {
		t.Error("docs/threat-model.md " + p)
	}
}

// TestTableTests: TableTests and MissingTests find what they must on a
// made-up page and tree.
func TestTableTests(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	src := "package b\n\nfunc TestOne(t *testing.T) {}\n\nfunc FuzzTwo(f *testing.F) {}\n\n// func TestCommented(\nfunc helperTestThree() {}\n"
	if err := os.WriteFile(filepath.Join(root, "a/b/b_test.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := strings.Join([]string{
		"| can / cannot | test |",
		"| --- | --- |",
		"| cannot do x | `a/b TestOne`, `FuzzTwo` (its seeds) |",
		"| cannot do y | `a/b TestGone`; `c/d TestOne` |",
		"| cannot do z | (by design) |",
		"| **can** do w | (by design) |",
		"| cannot use `a/b TestOne` here | `TestOne` |",
		"| cannot mistype | `a/b TestOne(` |",
		"| cannot pass `TestThree` | `a/b TestCommented`, `a/b TestThree` |",
		"",
		"| party | trusted for |",
		"| --- | --- |",
		"| cannot be read | `--trust` |",
	}, "\n")
	refs, probs := TableTests(doc)
	probs = append(probs, MissingTests(root, refs)...)
	want := []string{
		"line 5: says what a party cannot do but names no test",
		"line 7: `TestOne` comes before any package",
		"line 7: says what a party cannot do but names no test",
		"line 8: `a/b TestOne(` is not a test",
		"line 8: says what a party cannot do but names no test",
		"line 4: a/b TestGone: no such test",
		"line 4: c/d TestOne: no such test",
		"line 9: a/b TestCommented: no such test",
		"line 9: a/b TestThree: no such test",
	}
	if len(refs) != 6 {
		t.Errorf("TableTests found %d tests, want 6: %+v", len(refs), refs)
	}
	if len(probs) != len(want) {
		t.Errorf("got %d problems, want %d:\n%s", len(probs), len(want), strings.Join(probs, "\n"))
	}
	for _, w := range want {
		found := false
		for _, p := range probs {
			found = found || strings.HasPrefix(p, w)
		}
		if !found {
			t.Errorf("problems lack %q:\n%s", w, strings.Join(probs, "\n"))
		}
	}
}
