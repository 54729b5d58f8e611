package recipe

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kpreload/kpreload/builder/archive"
)

// TestArchiveKeyConfined: the key of an extra archive, named by a recipe's
// archives: or by archives.yaml, must be a file beside the recipes: a path
// that leaves the recipes directory, an absolute one, a link out of it, a
// FIFO and a file too big for a key are refused with an error naming the
// file, the line, the field and the path; a key inside it loads, resolved.
func TestArchiveKeyConfined(t *testing.T) {
	const pub = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmDMEZ\n-----END PGP PUBLIC KEY BLOCK-----\n"
	for _, c := range []struct {
		name string
		// setup makes the files around the recipes directory dir (in
		// outside, a directory beside it) and returns the key as written.
		setup func(t *testing.T, dir, outside string) string
		want  string // "" loads
	}{
		{"../x", func(t *testing.T, dir, outside string) string {
			write(t, filepath.Join(dir, "..", "x"), pub)
			return "../x"
		}, "../x leaves the recipes directory"},
		{"keys/../../x", func(t *testing.T, dir, outside string) string {
			write(t, filepath.Join(dir, "..", "x"), pub)
			return "keys/../../x"
		}, "keys/../../x leaves the recipes directory"},
		{"absolute", func(t *testing.T, dir, outside string) string {
			write(t, filepath.Join(outside, "team.asc"), pub)
			return filepath.Join(outside, "team.asc")
		}, filepath.Join("outside", "team.asc") + ": an absolute path is refused"},
		{"symlink out", func(t *testing.T, dir, outside string) string {
			write(t, filepath.Join(outside, "secret"), pub)
			symlink(t, filepath.Join(outside, "secret"), filepath.Join(dir, "keys", "team.asc"))
			return "keys/team.asc"
		}, "keys/team.asc is a link to "},
		{"relative symlink out", func(t *testing.T, dir, outside string) string {
			write(t, filepath.Join(outside, "secret"), pub)
			symlink(t, "../../outside/secret", filepath.Join(dir, "keys", "team.asc"))
			return "keys/team.asc"
		}, "keys/team.asc is a link to "},
		{"FIFO", func(t *testing.T, dir, outside string) string {
			if err := os.MkdirAll(filepath.Join(dir, "keys"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(filepath.Join(dir, "keys", "team.asc"), 0o644); err != nil {
				t.Fatal(err)
			}
			return "keys/team.asc"
		}, "it is a named pipe"},
		{"too big", func(t *testing.T, dir, outside string) string {
			write(t, filepath.Join(dir, "keys", "team.asc"), strings.Repeat("x", archive.MaxKeySize+1))
			return "keys/team.asc"
		}, "too big for an OpenPGP public key"},
		{"missing", func(t *testing.T, dir, outside string) string {
			return "keys/team.asc"
		}, "keys/team.asc: lstat "},
		{"OK", func(t *testing.T, dir, outside string) string {
			write(t, filepath.Join(dir, "keys", "team.asc"), pub)
			return "keys/team.asc"
		}, ""},
		{"OK through a link inside", func(t *testing.T, dir, outside string) string {
			write(t, filepath.Join(dir, "keys", "2026.asc"), pub)
			symlink(t, "2026.asc", filepath.Join(dir, "keys", "team.asc"))
			return "keys/team.asc"
		}, ""},
	} {
		for _, where := range []string{"recipe", SharedArchivesFile} {
			t.Run(c.name+" in "+where, func(t *testing.T) {
				top := t.TempDir()
				dir, outside := filepath.Join(top, "recipes"), filepath.Join(top, "outside")
				for _, d := range []string{dir, outside} {
					if err := os.MkdirAll(d, 0o755); err != nil {
						t.Fatal(err)
					}
				}
				key := c.setup(t, dir, outside)
				archives := fmt.Sprintf("archives:\n  - name: team\n    url: https://apt.example.com/debian\n    suites: [stable]\n    components: [main]\n    key: %s\n", key)
				recipe := "name: team-555\ndriver:\n  name: team\nflavor: proprietary\n"
				file := filepath.Join(dir, "team-555.yaml")
				errFile := file
				if where == SharedArchivesFile {
					errFile = filepath.Join(dir, SharedArchivesFile)
					write(t, errFile, archives)
				} else {
					recipe += archives
				}
				recipe += "source:\n  package: team-kernel-dkms\n  path: usr/src/team-{version}\n  select: {branch: \"555\", suites: [team]}\nmodules: [team]\nkernels:\n  releases: [6.1.0-56-cloud-amd64]\n"
				write(t, file, recipe)
				text, _ := os.ReadFile(errFile)
				line := 1 + strings.Count(string(text[:strings.Index(string(text), "key: ")]), "\n")

				r, err := Load(file)
				if c.want == "" {
					if err != nil {
						t.Fatalf("load: %v", err)
					}
					got, want := r.Archives[0].Key, filepath.Join(dir, "keys", "team.asc")
					if real, err := filepath.EvalSymlinks(want); err == nil {
						want = real
					}
					if got != want {
						t.Errorf("key: got %s, want %s", got, want)
					}
					// A link out swapped in after the load changes nothing:
					// the archive trusts the content read, confined, then.
					write(t, filepath.Join(outside, "evil.asc"), "evil")
					if err := os.Remove(got); err != nil {
						t.Fatal(err)
					}
					symlink(t, filepath.Join(outside, "evil.asc"), got)
					if got, want := string(r.Archives[0].KeyData), pub; got != want {
						t.Errorf("key data: got %q, want the content read at load %q", got, want)
					}
					return
				}
				t.Log(err)
				prefix := fmt.Sprintf("%s:%d: archives[0].key: ", errFile, line)
				if err == nil || !strings.Contains(err.Error(), prefix) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("load: got %v, want an error starting %q and saying %q", err, prefix, c.want)
				}
			})
		}
	}
}

// write writes text to file, making its directory.
func write(t *testing.T, file, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// symlink makes the link name to target, making its directory.
func symlink(t *testing.T, target, name string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, name); err != nil {
		t.Fatal(err)
	}
}
