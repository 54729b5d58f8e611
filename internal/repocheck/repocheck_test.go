package repocheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// largeFixtures are the tracked files over MaxFile, each with the reason it
// is in the repository. None today.
var largeFixtures = map[string]string{}

// TestNoTrackedBinaries: the repository tracks no ELF file and no file over
// 1 MiB that largeFixtures does not list.
func TestNoTrackedBinaries(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files in %s: %v (this test reads a git checkout)", root, err)
	}
	paths := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if len(paths) < 100 {
		t.Fatalf("git ls-files listed %d files; want the whole repository", len(paths))
	}
	for _, p := range Check(root, paths, largeFixtures) {
		t.Error(p)
	}
}

// TestCheck: Check finds what it must on a made-up tree.
func TestCheck(t *testing.T) {
	root := t.TempDir()
	files := map[string][]byte{
		"kpreload":      append([]byte("\x7fELF\x02\x01\x01"), make([]byte, 100)...),
		"big.json":      make([]byte, MaxFile+1),
		"fixture.img":   make([]byte, MaxFile+1),
		"exactly.bin":   make([]byte, MaxFile),
		"short":         []byte("\x7fE"),
		"empty":         nil,
		"README.md":     []byte("# ELF\n"),
		"mod/driver.ko": []byte("\x7fELF"),
	}
	for p, b := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("kpreload", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	paths := []string{"kpreload", "big.json", "fixture.img", "exactly.bin", "short", "empty", "README.md", "mod/driver.ko", "link", "deleted"}
	for _, tt := range []struct {
		name     string
		fixtures map[string]string
		want     []string
	}{
		{"no fixtures", nil, []string{"kpreload: an ELF file", "big.json: 1048577 bytes", "fixture.img: 1048577 bytes", "mod/driver.ko: an ELF file"}},
		{"a listed fixture", map[string]string{"fixture.img": "a disk image the boot tests read"}, []string{"kpreload: an ELF file", "big.json: 1048577 bytes", "mod/driver.ko: an ELF file"}},
		{"stale and reasonless entries", map[string]string{"fixture.img": " ", "gone.img": "was here"}, []string{"kpreload: an ELF file", "big.json: 1048577 bytes", "mod/driver.ko: an ELF file", "fixture.img: listed as a fixture without a reason", "gone.img: listed as a fixture but not tracked"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Check(root, paths, tt.fixtures)
			if len(got) != len(tt.want) {
				t.Fatalf("Check = %d problems, want %d:\n%s", len(got), len(tt.want), strings.Join(got, "\n"))
			}
			for _, w := range tt.want {
				found := false
				for _, g := range got {
					found = found || strings.HasPrefix(g, w)
				}
				if !found {
					t.Errorf("Check lacks %q:\n%s", w, strings.Join(got, "\n"))
				}
			}
		})
	}
}
