package archive

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

func TestSourcesList(t *testing.T) {
	const o = "[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
	for _, tt := range []struct{ suite, want string }{
		{"bookworm", "deb " + o + "http://deb.debian.org/debian bookworm main contrib non-free non-free-firmware\n" +
			"deb " + o + "http://deb.debian.org/debian bookworm-updates main contrib non-free non-free-firmware\n" +
			"deb " + o + "http://deb.debian.org/debian-security bookworm-security main contrib non-free non-free-firmware\n" +
			"deb " + o + "http://deb.debian.org/debian bookworm-backports main contrib non-free non-free-firmware\n"},
		{"trixie", "deb " + o + "http://deb.debian.org/debian trixie main contrib non-free non-free-firmware\n" +
			"deb " + o + "http://deb.debian.org/debian trixie-updates main contrib non-free non-free-firmware\n" +
			"deb " + o + "http://deb.debian.org/debian-security trixie-security main contrib non-free non-free-firmware\n" +
			"deb " + o + "http://deb.debian.org/debian trixie-backports main contrib non-free non-free-firmware\n"},
		{"sid", "deb " + o + "http://deb.debian.org/debian sid main contrib non-free non-free-firmware\n"},
		{"experimental", "deb " + o + "http://deb.debian.org/debian sid main contrib non-free non-free-firmware\n" +
			"deb " + o + "http://deb.debian.org/debian experimental main contrib non-free non-free-firmware\n"},
	} {
		a, err := New(tt.suite, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if got := a.SourcesList(); got != tt.want {
			t.Errorf("%s: SourcesList() =\n%s\nwant\n%s", tt.suite, got, tt.want)
		}
	}
}

// TestNewNoKeyring: without Debian's archive keyring New refuses a private
// configuration (which would otherwise trust every key of the host) and
// names the keyring.
func TestNewNoKeyring(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "debian-archive-keyring.gpg")
	defer func(k string) { debianKeyring = k }(debianKeyring)
	debianKeyring = missing
	_, err := New("bookworm", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf(`New("bookworm", cache) without the keyring: error = %v, want one naming %s`, err, missing)
	}
}

func TestNew(t *testing.T) {
	for _, tt := range []struct{ suite, cache, wantSuite, wantDir string }{
		// Every suite has its private configuration under the cache, bookworm's too.
		{"", "/c", "bookworm", "/c/apt/bookworm"},
		{"bookworm", "/c", "bookworm", "/c/apt/bookworm"},
		{"trixie", "/c", "trixie", "/c/apt/trixie"},
		// With no cache, only the host's own configuration is left.
		{"bookworm", "", "bookworm", ""},
	} {
		a, err := New(tt.suite, tt.cache)
		if err != nil {
			t.Errorf("New(%q, %q): %v", tt.suite, tt.cache, err)
			continue
		}
		if got, want := a.Suite+" "+a.Dir, tt.wantSuite+" "+tt.wantDir; got != want {
			t.Errorf("New(%q, %q) = suite and Dir %q, want %q", tt.suite, tt.cache, got, want)
		}
	}
	if _, err := New("trixie", ""); err == nil || !strings.Contains(err.Error(), "no cache directory") {
		t.Errorf(`New("trixie", "") error = %v, want no cache directory`, err)
	}
	if _, err := New("buster-ish", "/c"); err == nil || !strings.Contains(err.Error(), "kpreload reads bookworm, trixie") {
		t.Errorf(`New("buster-ish") error = %v, want the known suites`, err)
	}
}

func TestParseMadison(t *testing.T) {
	out := []byte(` nvidia-driver | 550.163.01-5.1 | http://deb.debian.org/debian sid/non-free amd64 Packages
 nvidia-driver | 550.163.01-2 | http://deb.debian.org/debian trixie/non-free amd64 Packages
 nvidia-driver | 550.163.01-2 | http://deb.debian.org/debian trixie/non-free Sources
 other | 1 | x
`)
	got := strings.Join(parseMadison(out, "nvidia-driver"), " ")
	if want := "550.163.01-5.1 550.163.01-2"; got != want {
		t.Errorf("parseMadison = %q, want %q", got, want)
	}
}

func TestKernelSuite(t *testing.T) {
	for rel, want := range map[string]string{
		"6.1.0-56-cloud-amd64":        "bookworm",
		"6.12.117+deb12-cloud-amd64":  "bookworm",
		"6.12.118+deb13-cloud-amd64":  "trixie",
		"6.12.90+deb13.1-cloud-amd64": "trixie",
	} {
		if got := KernelSuite(rel); got != want {
			t.Errorf("KernelSuite(%q) = %q, want %q", rel, got, want)
		}
	}
}

// realArchive returns the real trixie archive with its private configuration
// in the shared download cache (so the lists are fetched once a day).
func realArchive(t *testing.T, suite string) *Archive {
	t.Helper()
	testenv.SkipShort(t, "reads Debian's archive over the network")
	if _, err := exec.LookPath("apt-get"); err != nil {
		t.Fatalf("apt-get not found (%v): run on Debian with scripts/deps.sh", err)
	}
	a, err := New(suite, DefaultCache())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestTrixieThroughPrivateConfig reads trixie through the private
// configuration, refuses a version it lacks naming what it has, downloads
// and unpacks a real package, and leaves the host's apt state alone.
func TestTrixieThroughPrivateConfig(t *testing.T) {
	ctx := context.Background()
	hostLists := listDir(t, "/var/lib/apt/lists")
	a := realArchive(t, "trixie")
	has, err := a.Versions(ctx, "nvidia-open-kernel-dkms")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(has, " "), "550.163.01-2") {
		t.Errorf("trixie nvidia-open-kernel-dkms versions %v, want 550.163.01-2", has)
	}
	err = a.Check(ctx, "nvidia-open-kernel-dkms", "550.999.99-1")
	var nc *NotCarriedError
	if !errors.As(err, &nc) || !strings.Contains(err.Error(), "suite trixie does not carry version 550.999.99-1; it has ") || !strings.Contains(err.Error(), "550.163.01-2") {
		t.Errorf("Check(absent version) = %v, want a NotCarriedError naming what trixie has", err)
	}
	if err := a.Check(ctx, "no-such-package-kpreload", "1"); err == nil || !strings.Contains(err.Error(), "suite trixie has no package no-such-package-kpreload") {
		t.Errorf("Check(absent package) = %v", err)
	}
	dir := t.TempDir()
	// nvidia-persistenced is small (contrib, ~40 KB).
	tree, err := a.Unpack(ctx, "nvidia-persistenced", "550.163.01-1", filepath.Join(dir, "debs"), filepath.Join(dir, "sources"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(tree, "usr/bin/nvidia-persistenced")); err != nil {
		t.Errorf("unpacked tree lacks usr/bin/nvidia-persistenced: %v", err)
	}
	if _, err := exec.Command("dpkg-query", "-W", "nvidia-persistenced").Output(); err == nil {
		t.Errorf("nvidia-persistenced is registered with the host's dpkg: the archive installed it")
	}
	if got := listDir(t, "/var/lib/apt/lists"); got != hostLists {
		t.Errorf("the host's /var/lib/apt/lists changed while reading trixie")
	}
}

// TestScriptMatchesArchive runs scripts/lib.sh's apt_suite_opts and checks
// it writes the same private configuration as this package, bookworm's as
// trixie's.
func TestScriptMatchesArchive(t *testing.T) {
	lib, _ := filepath.Abs("../../scripts/lib.sh")
	for _, suite := range []string{"bookworm", "trixie"} {
		cache := t.TempDir()
		a, err := New(suite, cache)
		if err != nil {
			t.Fatal(err)
		}
		// Skip the network: the stamp says the lists are fresh.
		dir := filepath.Join(cache, "apt", suite)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "sources.list"), []byte("# kpreload's private apt configuration for "+suite+" (never used to install)\n"+a.SourcesList()), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "updated"), []byte("now\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("bash", "-c", `. "$1" && apt_suite_opts "$2"`, "x", lib, suite)
		cmd.Env = append(os.Environ(), "KPRELOAD_CACHE="+cache)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("apt_suite_opts %s: %v\n%s", suite, err, out)
		}
		if got, want := strings.Join(strings.Fields(string(out)), " "), strings.Join(a.aptOptions(), " "); got != want {
			t.Errorf("apt_suite_opts %s printed\n%s\nwant builder/archive's\n%s", suite, got, want)
		}
		if data, _ := os.ReadFile(filepath.Join(dir, "sources.list")); !strings.HasSuffix(string(data), a.SourcesList()) {
			t.Errorf("apt_suite_opts %s rewrote sources.list as\n%s\nwant\n%s", suite, data, a.SourcesList())
		}
	}
}

// TestRefresh: Refresh removes the freshness stamp of every private
// configuration of the cache, bookworm's included, and leaves one linked
// from another cache (as testenv.DownloadCache links the machine's
// bookworm lists) to that cache.
func TestRefresh(t *testing.T) {
	cache, other := t.TempDir(), t.TempDir()
	stamp := func(dir string) string {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "updated")
		if err := os.WriteFile(p, []byte("now\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	own := []string{stamp(filepath.Join(cache, "apt", "bookworm")), stamp(filepath.Join(cache, "apt", "trixie"))}
	linked := stamp(filepath.Join(other, "apt", "sid"))
	if err := os.Symlink(filepath.Dir(linked), filepath.Join(cache, "apt", "sid")); err != nil {
		t.Fatal(err)
	}
	if err := Refresh(context.Background(), cache); err != nil {
		t.Fatal(err)
	}
	for _, p := range own {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("after Refresh %s: %v, want it removed", p, err)
		}
	}
	if _, err := os.Stat(linked); err != nil {
		t.Errorf("Refresh removed the stamp of a configuration linked from another cache: %v", err)
	}
}

// listDir names the entries of dir with their sizes and times.
func listDir(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			continue
		}
		b.WriteString(e.Name() + " " + fi.ModTime().String() + "\n")
	}
	return b.String()
}

// TestBookwormThroughPrivateConfig reads bookworm through its private
// configuration from a mirror on loopback (reprepro, Release files signed by
// the mirror's own key) that carries a package the host's lists lack, and
// lacks one the host's lists carry: resolution, the publication date and
// downloads read the private lists only; after Refresh a new upload is seen
// at once; the host's lists stay as they were.
func TestBookwormThroughPrivateConfig(t *testing.T) {
	ctx := context.Background()
	repo := testenv.StartAptArchive(t, "bookworm", "bookworm-updates", "bookworm-security", "bookworm-backports")
	repo.Publish("bookworm-backports", "kpreload-private-bookworm", "1.0-1")
	hostLists := listDir(t, "/var/lib/apt/lists")
	cache := t.TempDir()
	open := func() *Archive {
		t.Helper()
		a, err := New("bookworm", cache)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := a.Dir, filepath.Join(cache, "apt", "bookworm"); got != want {
			t.Fatalf(`New("bookworm", cache).Dir = %q, want %q: bookworm has no private configuration`, got, want)
		}
		a.Mirror, a.SecurityMirror, a.SignedBy = repo.URL, repo.URL, repo.Key
		return a
	}
	a := open()
	got, err := a.VersionsOf(ctx, "kpreload-private-bookworm", "base-files")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(got), "map[base-files:[] kpreload-private-bookworm:[1.0-1]]"; got != want {
		t.Errorf("VersionsOf = %s, want %s (the private lists only)", got, want)
	}
	// apt-cache kept its binary cache, so the next call does not parse the
	// lists again, even where the host's apt configuration turns it off (as
	// Debian's container images do); the Refresh below shows it is rebuilt
	// when the lists change.
	if _, err := os.Stat(filepath.Join(a.Dir, "cache", "pkgcache.bin")); err != nil {
		t.Errorf("apt-cache kept no binary cache in the private configuration: %v", err)
	}
	sources, err := os.ReadFile(filepath.Join(a.Dir, "sources.list"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "deb [signed-by=" + repo.Key + "] " + repo.URL + " bookworm-security main contrib non-free non-free-firmware\n"; !strings.Contains(string(sources), want) {
		t.Errorf("sources.list =\n%s\nwant the line %q", sources, want)
	}
	carried, err := a.Carried(ctx, "kpreload-private-bookworm")
	if err != nil {
		t.Fatal(err)
	}
	if len(carried) != 1 || carried[0].Suite != "bookworm-backports" || carried[0].Published.IsZero() {
		t.Errorf("Carried = %+v, want 1.0-1 in bookworm-backports with its Release file's date", carried)
	}
	deb, err := a.Download(ctx, "kpreload-private-bookworm", "1.0-1", filepath.Join(cache, "debs"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := filepath.Base(deb), "kpreload-private-bookworm_1.0-1_amd64.deb"; got != want {
		t.Errorf("Download = %s, want %s", got, want)
	}

	// An upload after the lists were read: Refresh, as every follow cycle
	// does, and the next archive sees it — even when the upload re-signs the
	// suite within the second of the Release file apt holds (HTTP's
	// Last-Modified counts whole seconds: apt's If-Modified-Since of that
	// second would be answered 304). The new Release files are given the old
	// ones' time, as an upload in that second would leave them.
	dists := filepath.Join(repo.Dir, "dists", "bookworm-updates")
	before, err := os.Stat(filepath.Join(dists, "InRelease"))
	if err != nil {
		t.Fatal(err)
	}
	repo.Publish("bookworm-updates", "kpreload-private-bookworm", "1.0-2")
	for _, f := range []string{"InRelease", "Release", "Release.gpg"} {
		if err := os.Chtimes(filepath.Join(dists, f), before.ModTime(), before.ModTime()); err != nil {
			t.Fatal(err)
		}
	}
	if err := Refresh(context.Background(), cache); err != nil {
		t.Fatal(err)
	}
	has, err := open().Versions(ctx, "kpreload-private-bookworm")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(has, " "), "1.0-2 1.0-1"; got != want {
		t.Errorf("after Refresh: Versions = %q, want %q", got, want)
	}
	if got := listDir(t, "/var/lib/apt/lists"); got != hostLists {
		t.Errorf("the host's /var/lib/apt/lists changed while reading bookworm")
	}
}

// TestScriptUpdateLock: apt_suite_opts fetches a suite's lists under the
// configuration's update lock, as Update does, and removes the stamp before
// it fetches. While another holds the lock it runs no apt-get; a fetch that
// fails (a fake apt-get on PATH) leaves no stamp that would call the lists
// of a changed sources.list fresh.
func TestScriptUpdateLock(t *testing.T) {
	lib, _ := filepath.Abs("../../scripts/lib.sh")
	cache := t.TempDir()
	dir := filepath.Join(cache, "apt", "trixie")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A fresh stamp over an old sources.list: the script must fetch.
	if err := os.WriteFile(filepath.Join(dir, "sources.list"), []byte("deb http://example.invalid/old trixie main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stamp := filepath.Join(dir, "updated")
	if err := os.WriteFile(stamp, []byte("now\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	ran := filepath.Join(bin, "ran")
	if err := os.WriteFile(filepath.Join(bin, "apt-get"), []byte("#!/bin/sh\ntouch "+ran+"\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	unlock, err := lockDir(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-c", `. "$1" && apt_suite_opts "$2"`, "x", lib, "trixie")
	cmd.Env = append(os.Environ(), "KPRELOAD_CACHE="+cache, "PATH="+bin+":"+os.Getenv("PATH"))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if _, err := os.Stat(ran); err == nil {
		t.Errorf("apt_suite_opts ran apt-get update while another held %s", filepath.Join(dir, updateLock))
	}
	unlock()
	if err := cmd.Wait(); err == nil {
		t.Errorf("apt_suite_opts succeeded with a failing apt-get update:\n%s", out.String())
	}
	if _, err := os.Stat(ran); err != nil {
		t.Errorf("apt_suite_opts never ran apt-get update once the lock was free:\n%s", out.String())
	}
	if _, err := os.Stat(stamp); err == nil {
		t.Errorf("a failed apt-get update left the stamp %s: the lists of the changed sources.list would count as fresh", stamp)
	}
}

// TestRefreshWaitsForUpdate: Refresh removes a stamp under the
// configuration's update lock, so while an Update holds it (and may yet
// stamp lists fetched before the Refresh) the stamp stays, and it goes once
// the lock is free.
func TestRefreshWaitsForUpdate(t *testing.T) {
	cache := t.TempDir()
	dir := filepath.Join(cache, "apt", "trixie")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stamp := filepath.Join(dir, "updated")
	if err := os.WriteFile(stamp, []byte("now\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	unlock, err := lockDir(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Refresh(ctx, cache) }()
	select {
	case err := <-done:
		unlock()
		t.Fatalf("Refresh returned (%v) while an update held %s, want it to wait", err, filepath.Join(dir, updateLock))
	case <-time.After(500 * time.Millisecond):
	}
	unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stamp); !os.IsNotExist(err) {
		t.Errorf("after Refresh %s: %v, want it removed", stamp, err)
	}
}
