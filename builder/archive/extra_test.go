package archive

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestExtraArchiveSignature reads a real local archive (reprepro, signed with
// gpg, served on loopback) through a private configuration: signed by its key
// it resolves, with the suite and the Release file's date; signed by another
// key, or unsigned, it is refused with an error that says so.
func TestExtraArchiveSignature(t *testing.T) {
	ctx := context.Background()
	repo := testenv.StartAptArchive(t, "stable")
	repo.Publish("stable", "kpreload-test-dkms", "555.1.2-1")
	wrong := repo.NewKey(filepath.Join(t.TempDir(), "other.asc"))
	extra := Extra{Name: "team", URL: repo.URL, Suites: []string{"stable"}, Components: []string{"main"}, Key: repo.Key}

	good, err := NewExtra(extra, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	got, err := good.Carried(ctx, "kpreload-test-dkms")
	if err != nil {
		t.Fatalf("signed archive: %v", err)
	}
	if len(got) != 1 || got[0].Version != "555.1.2-1" || got[0].Suite != "stable" || got[0].Published.IsZero() {
		t.Errorf("Carried = %+v, want 555.1.2-1 in stable with the Release file's date", got)
	}

	for _, tc := range []struct {
		name   string
		key    string
		unsign bool
	}{
		{name: "wrong key", key: wrong},
		{name: "unsigned", key: repo.Key, unsign: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.unsign {
				repo.Unsign()
			}
			x := extra
			x.Key = tc.key
			a, err := NewExtra(x, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			got, err := a.Carried(ctx, "kpreload-test-dkms")
			if err == nil {
				t.Fatalf("Carried = %+v, want a signature error", got)
			}
			if !strings.Contains(err.Error(), "is not signed by the key "+tc.key) {
				t.Errorf("error = %v, want it to say the Release file is not signed by the key", err)
			}
		})
	}
}

func TestExtraCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		x    Extra
		want string
	}{
		{"ok", Extra{Name: "cuda", URL: "https://example.invalid/repo", Suites: []string{"/"}, Components: []string{"main"}, Key: "k.asc"}, ""},
		{"no key", Extra{Name: "cuda", URL: "https://example.invalid/repo", Suites: []string{"stable"}, Components: []string{"main"}}, "key: missing"},
		{"debian name", Extra{Name: "trixie", URL: "https://example.invalid/repo", Suites: []string{"stable"}, Components: []string{"main"}, Key: "k"}, "is a Debian suite"},
		{"bad url", Extra{Name: "cuda", URL: "ftp://x", Suites: []string{"stable"}, Components: []string{"main"}, Key: "k"}, "url:"},
		{"option injection", Extra{Name: "cuda", URL: "https://x/", Suites: []string{"stable] [trusted=yes"}, Components: []string{"main"}, Key: "k"}, "suites[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.x.Check()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("Check() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestExtraKeyHostile checks a key file the recipe names is read only when
// it is a regular file of a key's size: a FIFO fails at once instead of
// blocking, an endless device and a huge file are refused, a link to a
// regular key is followed as any path is.
func TestExtraKeyHostile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "key.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge.asc")
	if err := os.WriteFile(huge, make([]byte, MaxKeySize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.asc")
	if err := os.WriteFile(good, []byte("-----BEGIN PGP PUBLIC KEY BLOCK-----\nx\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.asc")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key     string
		wantErr bool
	}{
		{fifo, true}, {"/dev/zero", true}, {huge, true}, {good, false}, {link, false},
	} {
		t.Run(filepath.Base(tc.key), func(t *testing.T) {
			a := &Archive{Suite: "team", Dir: t.TempDir(), extra: &Extra{Name: "team", Key: tc.key}}
			done := make(chan error, 1)
			go func() { _, err := a.installKey(); done <- err }()
			select {
			case err := <-done:
				if got := err != nil; got != tc.wantErr {
					t.Errorf("installKey(%s) error = %v, want an error: %v", tc.key, err, tc.wantErr)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("installKey(%s) still reading after 10 s", tc.key)
			}
		})
	}
}

// TestExtraKeyData: an archive whose key was read (confined) at load
// installs that content, even once its key file has become a link out.
func TestExtraKeyData(t *testing.T) {
	dir := t.TempDir()
	evil := filepath.Join(dir, "evil.asc")
	if err := os.WriteFile(evil, []byte("-----BEGIN PGP PUBLIC KEY BLOCK-----\nevil\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "team.asc")
	if err := os.Symlink(evil, key); err != nil {
		t.Fatal(err)
	}
	const loaded = "-----BEGIN PGP PUBLIC KEY BLOCK-----\nloaded\n"
	a, err := NewExtra(Extra{Name: "team", URL: "https://apt.example.com/debian", Suites: []string{"stable"}, Components: []string{"main"}, Key: key, KeyData: []byte(loaded)}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(a.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dest, err := a.installKey()
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dest); string(got) != loaded {
		t.Errorf("installKey wrote %q, want the key read at load %q", got, loaded)
	}
}
