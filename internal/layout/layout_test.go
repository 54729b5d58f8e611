package layout

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func mkfile(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestCompanion(t *testing.T) {
	tmp := t.TempDir()
	checkout, lib := filepath.Join(tmp, "bin"), filepath.Join(tmp, "lib")
	mkfile(t, filepath.Join(checkout, Init))
	mkfile(t, filepath.Join(lib, Init))
	mkfile(t, filepath.Join(lib, RootInit))
	installed := filepath.Join(tmp, "usr/bin")
	mkfile(t, filepath.Join(installed, "kpreload"))
	for _, tt := range []struct {
		name, exe, prog, want string
	}{
		{"beside first", filepath.Join(checkout, "kpreload"), Init, filepath.Join(checkout, Init)},
		{"then LibDir", filepath.Join(checkout, "kpreload"), RootInit, filepath.Join(lib, RootInit)},
		{"installed", filepath.Join(installed, "kpreload"), Init, filepath.Join(lib, Init)},
		{"nowhere: beside", filepath.Join(installed, "kpreload"), Plugin, filepath.Join(installed, Plugin)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := companion(tt.exe, lib, tt.prog); got != tt.want {
				t.Errorf("companion(%s, %s) = %s, want %s", tt.exe, tt.prog, got, tt.want)
			}
		})
	}
}

func TestRecipesDir(t *testing.T) {
	tmp := t.TempDir()
	local, packaged := filepath.Join(tmp, "checkout/recipes"), filepath.Join(tmp, "usr/share/kpreload/recipes")
	file := filepath.Join(tmp, "file")
	mkfile(t, file)
	for _, d := range []string{local, packaged} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	missing := filepath.Join(tmp, "missing")
	for _, tt := range []struct {
		name, local, packaged, want, wantErr string
	}{
		{"checkout wins", local, packaged, local, ""},
		{"packaged when no checkout", missing, packaged, packaged, ""},
		{"a file is no directory", file, packaged, packaged, ""},
		{"neither", missing, missing + "2", "", "neither " + missing + " (a kpreload checkout) nor " + missing + "2 (the kpreload package) is one; name one with --recipes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := recipesDir(tt.local, tt.packaged)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("recipesDir = %q, %v; want an error saying %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("recipesDir = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestRecipesDirHere: from the repository's internal/layout the checkout's
// recipes are not in the working directory; from the root they are.
func TestRecipesDirHere(t *testing.T) {
	t.Chdir("../..")
	if got, err := RecipesDir(); err != nil || got != LocalRecipes {
		t.Errorf("RecipesDir at the repository root = %q, %v; want %q", got, err, LocalRecipes)
	}
}
