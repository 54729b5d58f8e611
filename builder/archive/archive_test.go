package archive

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

func TestSourcesList(t *testing.T) {
	for _, tt := range []struct{ suite, want string }{
		{"trixie", "deb http://deb.debian.org/debian trixie main contrib non-free non-free-firmware\n" +
			"deb http://deb.debian.org/debian trixie-updates main contrib non-free non-free-firmware\n" +
			"deb http://deb.debian.org/debian-security trixie-security main contrib non-free non-free-firmware\n" +
			"deb http://deb.debian.org/debian trixie-backports main contrib non-free non-free-firmware\n"},
		{"sid", "deb http://deb.debian.org/debian sid main contrib non-free non-free-firmware\n"},
		{"experimental", "deb http://deb.debian.org/debian sid main contrib non-free non-free-firmware\n" +
			"deb http://deb.debian.org/debian experimental main contrib non-free non-free-firmware\n"},
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

func TestNew(t *testing.T) {
	a, err := New("", "/c")
	if err != nil || a.Suite != DefaultSuite || a.Dir != "" {
		t.Errorf(`New("") = %+v, %v; want the host's bookworm`, a, err)
	}
	if a, err = New("trixie", "/c"); err != nil || a.Dir != "/c/apt/trixie" {
		t.Errorf(`New("trixie") = %+v, %v; want Dir /c/apt/trixie`, a, err)
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
// it writes the same private configuration as this package.
func TestScriptMatchesArchive(t *testing.T) {
	cache := t.TempDir()
	a, err := New("trixie", cache)
	if err != nil {
		t.Fatal(err)
	}
	lib, _ := filepath.Abs("../../scripts/lib.sh")
	// Skip the network: the stamp says the lists are fresh.
	dir := filepath.Join(cache, "apt", "trixie")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sources.list"), []byte("# kpreload's private apt configuration for trixie (never used to install)\n"+a.SourcesList()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "updated"), []byte("now\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-c", `. "$1" && apt_suite_opts trixie`, "x", lib)
	cmd.Env = append(os.Environ(), "KPRELOAD_CACHE="+cache)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("apt_suite_opts: %v\n%s", err, out)
	}
	if got, want := strings.Join(strings.Fields(string(out)), " "), strings.Join(a.aptOptions(), " "); got != want {
		t.Errorf("apt_suite_opts printed\n%s\nwant builder/archive's\n%s", got, want)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "sources.list")); !strings.HasSuffix(string(data), a.SourcesList()) {
		t.Errorf("apt_suite_opts rewrote sources.list as\n%s\nwant\n%s", data, a.SourcesList())
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
