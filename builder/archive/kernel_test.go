package archive

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/internal/versort"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

func TestParsePolicy(t *testing.T) {
	out := []byte(`linux-image-6.1.0-56-cloud-amd64-unsigned:
  Installed: (none)
  Candidate: 6.1.192-2
  Version table:
     6.1.192-2 500
        500 http://deb.debian.org/debian-security bookworm-security/main amd64 Packages
linux-kbuild-6.1:
  Installed: 6.1.176-1
  Candidate: 6.1.192-2
  Version table:
     6.1.192-2 500
 *** 6.1.176-1 500
virtual-only:
  Installed: (none)
  Candidate: (none)
  Version table:
`)
	got := parsePolicy(out)
	for _, tt := range []struct{ name, want string }{
		{"linux-image-6.1.0-56-cloud-amd64-unsigned", "6.1.192-2"},
		{"linux-kbuild-6.1", "6.1.192-2"},
		{"virtual-only", ""},
		{"not-mentioned", ""},
	} {
		if got[tt.name] != tt.want {
			t.Errorf("parsePolicy: %s = %q, want %q", tt.name, got[tt.name], tt.want)
		}
	}
	if len(got) != 2 {
		t.Errorf("parsePolicy = %v, want 2 packages", got)
	}
}

func TestParseDepends(t *testing.T) {
	for _, tt := range []struct{ out, want string }{
		{"linux-headers-6.1.0-56-cloud-amd64\n  Depends: linux-headers-6.1.0-56-common\n  Depends: linux-kbuild-6.1\n  Depends: linux-compiler-gcc-12-x86\n",
			"linux-headers-6.1.0-56-common linux-kbuild-6.1 linux-compiler-gcc-12-x86"},
		{"p\n |Depends: a\n  Depends: b\n  PreDepends: c\n  Recommends: d\n  Depends: <virtual>\n  Depends: a\n", "a b c"},
		{"p\n", ""},
	} {
		if got := strings.Join(parseDepends([]byte(tt.out)), " "); got != tt.want {
			t.Errorf("parseDepends(%q) = %q, want %q", tt.out, got, tt.want)
		}
	}
}

func TestCompareNatural(t *testing.T) {
	in := []string{"6.12.38+deb13-cloud-amd64", "6.1.0-9-cloud-amd64", "6.12.117+deb12-cloud-amd64", "6.1.0-56-cloud-amd64", "6.1.0-10-cloud-amd64"}
	want := []string{"6.1.0-9-cloud-amd64", "6.1.0-10-cloud-amd64", "6.1.0-56-cloud-amd64", "6.12.38+deb13-cloud-amd64", "6.12.117+deb12-cloud-amd64"}
	got := slices.Clone(in)
	slices.SortFunc(got, versort.Compare)
	if !slices.Equal(got, want) {
		t.Errorf("sorted %v\n got %v\nwant %v", in, got, want)
	}
}

func TestKernelNotFoundError(t *testing.T) {
	for _, tt := range []struct {
		err  KernelNotFoundError
		want string
	}{
		{KernelNotFoundError{Release: "6.1.0-999-cloud-amd64", Suite: "bookworm", Available: []string{"6.1.0-55-cloud-amd64", "6.1.0-56-cloud-amd64"}},
			"kernel 6.1.0-999-cloud-amd64 is not in the apt archive (suite bookworm); available cloud kernels: 6.1.0-55-cloud-amd64 6.1.0-56-cloud-amd64"},
		{KernelNotFoundError{Release: "7.0-x", Suite: "sid"}, "kernel 7.0-x is not in the apt archive (suite sid); available cloud kernels: none"},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

// TestFetchKernelRefusesNames checks that what is not a kernel release
// never reaches apt nor the file system.
func TestFetchKernelRefusesNames(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no apt-get, no dpkg
	cache := t.TempDir()
	a, err := New("", cache)
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"", "../etc", "6.1/../../x", "-o=APT::x", "6.1.0 56"} {
		if _, err := a.FetchKernel(context.Background(), rel, cache, nil); err == nil || !strings.Contains(err.Error(), "not a kernel release") {
			t.Errorf("FetchKernel(%q) error = %v, want not a kernel release", rel, err)
		}
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Errorf("refused names left %d entries in the cache", len(ents))
	}
}

// TestFetchKernelKeepsComplete checks that a kernel already unpacked is
// returned as it is, without apt.
func TestFetchKernelKeepsComplete(t *testing.T) {
	const rel = "6.1.0-56-cloud-amd64"
	cache := t.TempDir()
	dir := KernelDir(cache, rel)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, completeMarker), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", t.TempDir())
	a, err := New("", cache)
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.FetchKernel(context.Background(), rel, cache, func(string) { t.Errorf("progress from a kept kernel") })
	if err != nil || got != dir {
		t.Errorf("FetchKernel = %q, %v; want %q, nil", got, err, dir)
	}
}

// TestFetchKernelNotInArchive asks the host's bookworm sources for a kernel
// they do not have: the error lists the cloud kernels they do.
func TestFetchKernelNotInArchive(t *testing.T) {
	cache := t.TempDir()
	a := realArchive(t, "")
	_, err := a.FetchKernel(context.Background(), "6.1.0-999-cloud-amd64", cache, nil)
	var nf *KernelNotFoundError
	if !errors.As(err, &nf) || nf.Suite != "bookworm" || !slices.Contains(nf.Available, "6.1.0-56-cloud-amd64") {
		t.Fatalf("FetchKernel(absent) = %v, want a KernelNotFoundError listing 6.1.0-56-cloud-amd64", err)
	}
	if KernelUnpacked(cache, "6.1.0-999-cloud-amd64") {
		t.Errorf("an absent kernel is marked unpacked")
	}
}

// TestFetchKernel fetches a real kernel into an empty cache (the .debs
// copied from the shared download cache when it has them, else downloaded)
// and checks the tree is one the builds can use.
func TestFetchKernel(t *testing.T) {
	testenv.SkipShort(t, "downloads and unpacks a whole kernel (about 190 MB)")
	const rel = "6.1.0-56-cloud-amd64"
	cache := t.TempDir()
	shared, _ := filepath.Glob(filepath.Join(testenv.CacheRoot(), "debs", "linux-*-6.1.0-56-*.deb"))
	kbuild, _ := filepath.Glob(filepath.Join(testenv.CacheRoot(), "debs", "linux-kbuild-6.1_*.deb"))
	if err := os.MkdirAll(filepath.Join(cache, "debs"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, deb := range append(shared, kbuild...) {
		if err := fileutil.CopyFile(deb, filepath.Join(cache, "debs", filepath.Base(deb)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a := realArchive(t, "")
	var lines []string
	dir, err := a.FetchKernel(context.Background(), rel, cache, func(l string) { lines = append(lines, l) })
	if err != nil {
		t.Fatal(err)
	}
	if want := KernelDir(cache, rel); dir != want || !KernelUnpacked(cache, rel) {
		t.Fatalf("FetchKernel = %q (unpacked %v), want %q with its marker", dir, KernelUnpacked(cache, rel), want)
	}
	for _, f := range []string{
		"boot/vmlinuz-" + rel,
		"lib/modules/" + rel + "/modules.dep",
		"lib/modules/" + rel + "/kernel/drivers/net/virtio_net.ko",
		"usr/src/linux-headers-" + rel + "/Module.symvers",
		"usr/src/linux-headers-" + rel + "/.config",
		"usr/src/linux-headers-" + rel + "/scripts/sign-file", // through the link into linux-kbuild
	} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("fetched kernel lacks %s: %v", f, err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(cache, "kernels", ".tmp*")); len(left) != 0 {
		t.Errorf("temporary trees left: %v", left)
	}
	if len(lines) == 0 || !strings.Contains(lines[len(lines)-1], "ready in "+dir) {
		t.Errorf("progress = %q, want a last line saying where the kernel is", lines)
	}
	var files int
	filepath.WalkDir(dir, func(string, fs.DirEntry, error) error { files++; return nil })
	// Fetched again: kept, nothing asked of apt.
	t.Setenv("PATH", t.TempDir())
	if again, err := a.FetchKernel(context.Background(), rel, cache, nil); err != nil || again != dir {
		t.Errorf("second FetchKernel = %q, %v; want the kept %q", again, err, dir)
	}
	t.Logf("%s: %d entries; %s", rel, files, strings.Join(lines, "; "))
}
