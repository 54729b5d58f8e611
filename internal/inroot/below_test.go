package inroot

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestBelow: a name below a directory is resolved the same way whether the
// directory is given relative to the working directory or absolute: the
// same names are accepted (with the same absolute, links-followed result)
// and the same are refused (an absolute name, "..", a link out, relative or
// absolute, a link to a directory outside).
func TestBelow(t *testing.T) {
	top, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"d/keys", "d/sub", "outside"} {
		if err := os.MkdirAll(filepath.Join(top, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"d/keys/k", "outside/k"} {
		if err := os.WriteFile(filepath.Join(top, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"d/keys/in":      "k",
		"d/keys/absin":   filepath.Join(top, "d/keys/k"),
		"d/keys/back":    "../../d/keys/k",
		"d/keys/out":     "../../outside/k",
		"d/keys/absout":  "/etc/passwd",
		"d/keys/dangle":  "gone",
		"d/sub/outdir":   "../../outside",
		"d/sub/selfdir":  "..",
		"d/sub/rootlink": "/",
	} {
		if err := os.Symlink(target, filepath.Join(top, link)); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		wantRel string // the accepted name's Rel; "" when refused
		wantHow string // how it is refused (OutsideError.How); "" for another error
		wantErr error  // errors.Is of the error, when refused
	}{
		{"keys/k", "keys/k", "", nil},
		{"keys/./k", "keys/k", "", nil},
		{"keys/../keys/k", "keys/k", "", nil},
		{"keys/in", "keys/k", "", nil},
		{"keys/absin", "keys/k", "", nil},
		{"keys/back", "keys/k", "", nil},
		{"sub/selfdir/keys/k", "keys/k", "", nil},
		{".", ".", "", nil},
		{"", ".", "", nil},
		{"../outside/k", "", OutDotDot, ErrOutside},
		{"keys/../../outside/k", "", OutDotDot, ErrOutside},
		{filepath.Join(top, "d/keys/k"), "", OutAbsolute, ErrOutside},
		{"keys/out", "", OutLink, ErrOutside},
		{"keys/absout", "", OutLink, ErrOutside},
		{"sub/outdir/k", "", OutLink, ErrOutside},
		{"sub/rootlink/etc", "", OutLink, ErrOutside},
		{"keys/dangle", "", "", fs.ErrNotExist},
		{"keys/none", "", "", fs.ErrNotExist},
	}
	for _, spelled := range []string{"relative", "absolute"} {
		dir := filepath.Join(top, "d")
		if spelled == "relative" {
			t.Chdir(top)
			dir = "d"
		}
		for _, tc := range tests {
			got, err := Below(dir, tc.name)
			if tc.wantRel != "" {
				want := Resolved{Base: filepath.Join(top, "d"), Path: filepath.Join(top, "d", tc.wantRel), Rel: tc.wantRel}
				if err != nil || got != want {
					t.Errorf("%s: Below(%q, %q) = %+v, %v; want %+v", spelled, dir, tc.name, got, err, want)
				}
				continue
			}
			var out *OutsideError
			gotHow := ""
			if errors.As(err, &out) {
				gotHow = out.How
			}
			if !errors.Is(err, tc.wantErr) || gotHow != tc.wantHow {
				t.Errorf("%s: Below(%q, %q) = %+v, %v; want an error wrapping %v, refused as %q", spelled, dir, tc.name, got, err, tc.wantErr, tc.wantHow)
			}
		}
	}
}
