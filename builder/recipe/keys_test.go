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
// that leaves the recipes directory, an absolute one, a link out of it
// (relative or absolute), a FIFO and a file too big for a key are refused
// with an error naming the file, the line, the field and the path; a key
// inside it loads, resolved. Each case runs with the recipe named by a
// relative path (from the working directory, as the default --recipes
// recipes is) and by an absolute one: the answers are the same.
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
		{"absolute symlink out", func(t *testing.T, dir, outside string) string {
			write(t, filepath.Join(outside, "secret"), pub)
			symlink(t, "/etc/passwd", filepath.Join(dir, "keys", "team.asc"))
			return "keys/team.asc"
		}, "keys/team.asc is a link to /etc/passwd, outside the recipes directory"},
		{"directory link out", func(t *testing.T, dir, outside string) string {
			write(t, filepath.Join(outside, "team.asc"), pub)
			symlink(t, "../outside", filepath.Join(dir, "keys"))
			return "keys/team.asc"
		}, "keys/team.asc is a link to "},
		{"dangling link", func(t *testing.T, dir, outside string) string {
			symlink(t, "gone.asc", filepath.Join(dir, "keys", "team.asc"))
			return "keys/team.asc"
		}, "no such file or directory"},
		{"directory", func(t *testing.T, dir, outside string) string {
			write(t, filepath.Join(dir, "keys", "team.asc", "x"), pub)
			return "keys/team.asc"
		}, "it is a directory"},
		{"OK with . in the path", func(t *testing.T, dir, outside string) string {
			write(t, filepath.Join(dir, "keys", "team.asc"), pub)
			return "keys/./team.asc"
		}, ""},
		{"OK through a link inside", func(t *testing.T, dir, outside string) string {
			write(t, filepath.Join(dir, "keys", "2026.asc"), pub)
			symlink(t, "2026.asc", filepath.Join(dir, "keys", "team.asc"))
			return "keys/team.asc"
		}, ""},
		{"OK through an absolute link inside", func(t *testing.T, dir, outside string) string {
			write(t, filepath.Join(dir, "keys", "2026.asc"), pub)
			symlink(t, filepath.Join(dir, "keys", "2026.asc"), filepath.Join(dir, "keys", "team.asc"))
			return "keys/team.asc"
		}, ""},
		{"OK through a link out and back in", func(t *testing.T, dir, outside string) string {
			write(t, filepath.Join(dir, "keys", "2026.asc"), pub)
			symlink(t, "../../recipes/keys/2026.asc", filepath.Join(dir, "keys", "team.asc"))
			return "keys/team.asc"
		}, ""},
	} {
		for _, where := range []string{"recipe", SharedArchivesFile} {
			for _, spelled := range []string{"relative", "absolute"} {
				t.Run(c.name+" in "+where+" "+spelled, func(t *testing.T) {
					archiveKeyCase(t, c.setup, c.want, where, spelled)
				})
			}
		}
	}
}

// archiveKeyCase is one case of TestArchiveKeyConfined: setup makes the key,
// want is "" when the recipe loads, where is "recipe" or
// SharedArchivesFile, and spelled says how the recipe file is named:
// "relative" to the working directory (the directory above the recipes) or
// "absolute".
func archiveKeyCase(t *testing.T, setup func(t *testing.T, dir, outside string) string, wantErr, where, spelled string) {
	const pub = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmDMEZ\n-----END PGP PUBLIC KEY BLOCK-----\n"
	top := t.TempDir()
	dir, outside := filepath.Join(top, "recipes"), filepath.Join(top, "outside")
	for _, d := range []string{dir, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	key := setup(t, dir, outside)
	archives := fmt.Sprintf("archives:\n  - name: team\n    url: https://apt.example.com/debian\n    suites: [stable]\n    components: [main]\n    key: %s\n", key)
	recipe := "name: team-555\ndriver:\n  name: team\nflavor: proprietary\n"
	if where == SharedArchivesFile {
		write(t, filepath.Join(dir, SharedArchivesFile), archives)
	} else {
		recipe += archives
	}
	recipe += "source:\n  package: team-kernel-dkms\n  path: usr/src/team-{version}\n  select: {branch: \"555\", suites: [team]}\nmodules: [team]\nkernels:\n  releases: [6.1.0-56-cloud-amd64]\n"
	write(t, filepath.Join(dir, "team-555.yaml"), recipe)
	// The recipe as Load is given it, relative to the working
	// directory or absolute; errors name it so.
	named := dir
	if spelled == "relative" {
		t.Chdir(top)
		named = "recipes"
	}
	file := filepath.Join(named, "team-555.yaml")
	errFile := file
	if where == SharedArchivesFile {
		errFile = filepath.Join(named, SharedArchivesFile)
	}
	text, _ := os.ReadFile(errFile)
	line := 1 + strings.Count(string(text[:strings.Index(string(text), "key: ")]), "\n")

	r, err := Load(file)
	if wantErr == "" {
		if err != nil {
			t.Fatalf("load: %v", err)
		}
		// The key's absolute path, links followed, either way.
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
	if err == nil || !strings.Contains(err.Error(), prefix) || !strings.Contains(err.Error(), wantErr) {
		t.Errorf("load: got %v, want an error starting %q and saying %q", err, prefix, wantErr)
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
