package archive

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReleaseDates: the Date of each pocket's Release file, in the sources'
// order, read from lists that are fresh (no apt-get update runs); a pocket
// whose Release file is missing is an error naming it.
func TestReleaseDates(t *testing.T) {
	if _, err := os.Stat(debianKeyring); err != nil {
		t.Fatalf("Debian's archive keyring: %v (install debian-archive-keyring)", err)
	}
	cache := t.TempDir()
	a, err := New("bookworm", cache)
	if err != nil {
		t.Fatal(err)
	}
	lists := filepath.Join(a.Dir, "lists")
	if err := os.MkdirAll(lists, 0o755); err != nil {
		t.Fatal(err)
	}
	want := "# kpreload's private apt configuration for bookworm (never used to install)\n" + a.SourcesList()
	for name, data := range map[string]string{
		"sources.list": want, "updated": "fresh\n",
		"lists/deb.debian.org_debian_dists_bookworm_InRelease":                   "Origin: Debian\nDate: Sat, 08 Nov 2025 09:30:00 UTC\n",
		"lists/deb.debian.org_debian_dists_bookworm-updates_InRelease":           "Date: Sun, 09 Nov 2025 20:14:03 UTC\n",
		"lists/deb.debian.org_debian-security_dists_bookworm-security_InRelease": "Date: Mon, 10 Nov 2025 01:02:03 UTC\n",
	} {
		if err := os.WriteFile(filepath.Join(a.Dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err = a.ReleaseDates(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no Release file of http://deb.debian.org/debian bookworm-backports") {
		t.Fatalf("ReleaseDates without backports' Release file: %v; want an error naming it", err)
	}
	if err := os.WriteFile(filepath.Join(lists, "deb.debian.org_debian_dists_bookworm-backports_InRelease"), []byte("Date: Tue, 11 Nov 2025 00:00:00 UTC\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, _ = New("bookworm", cache)
	got, err := a.ReleaseDates(context.Background())
	if w := "bookworm=2025-11-08T09:30:00Z bookworm-updates=2025-11-09T20:14:03Z bookworm-security=2025-11-10T01:02:03Z bookworm-backports=2025-11-11T00:00:00Z"; err != nil || got != w {
		t.Errorf("ReleaseDates = %q, %v; want %q", got, err, w)
	}
}
