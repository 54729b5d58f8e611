package cdispec

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestReadLdcache holds the parser to the real ldconfig: every line of
// `ldconfig -p` for the host's cache is an entry ReadLdcache returns.
func TestReadLdcache(t *testing.T) {
	ldconfig := findLdconfig(t)
	out, err := exec.Command(ldconfig, "-p").Output()
	if err != nil {
		t.Skipf("ldconfig -p: %v", err)
	}
	var want []string
	for _, line := range strings.Split(string(out), "\n")[1:] {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), " ")
		_, path, ok2 := strings.Cut(rest, "=> ")
		if ok && ok2 {
			want = append(want, name+" "+path)
		}
	}
	entries, err := ReadLdcache("/", "/etc/ld.so.cache")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name+" "+e.Path)
	}
	sort.Strings(got)
	sort.Strings(want)
	if len(want) == 0 || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("ReadLdcache: %d entries, ldconfig -p: %d; first got %q", len(got), len(want), first(got))
	}
	if _, err := parseLdcache([]byte("not a cache")); err == nil {
		t.Error("parseLdcache accepted garbage")
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

func findLdconfig(t *testing.T) string {
	t.Helper()
	for _, p := range []string{DefaultLdconfig, "/usr/sbin/ldconfig"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skip("no ldconfig")
	return ""
}

// TestUpdateLdcache runs the hook the way a runtime does (OCI state on stdin,
// the bundle's config.json naming the root) on a container root holding a real
// shared library copied from the host, and checks the container's cache, read
// back with ReadLdcache, resolves it from the folder.
func TestUpdateLdcache(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("ldconfig -r needs root (chroot)")
	}
	ldconfig := findLdconfig(t)
	lib, err := filepath.EvalSymlinks("/lib/x86_64-linux-gnu/libz.so.1")
	if err != nil {
		t.Skip("no libz.so.1 to copy")
	}
	bundle := t.TempDir()
	root := filepath.Join(bundle, "rootfs")
	copyFile(t, lib, filepath.Join(root, "usr/local/nvidia/lib64", filepath.Base(lib)))
	write(t, filepath.Join(bundle, "config.json"), `{"ociVersion":"1.0.2","root":{"path":"rootfs"}}`)
	state := fmt.Sprintf(`{"ociVersion":"1.0.2","id":"c1","status":"creating","pid":1,"bundle":%q}`, bundle)
	got, err := ContainerRoot(strings.NewReader(state))
	if err != nil || got != root {
		t.Fatalf("ContainerRoot = %q, %v; want %q", got, err, root)
	}
	if err := UpdateLdcache(root, ldconfig, []string{"/usr/local/nvidia/lib64", "/not/mounted"}); err != nil {
		t.Fatal(err)
	}
	conf, _ := os.ReadFile(filepath.Join(root, "etc/ld.so.conf"))
	if string(conf) != "include /etc/ld.so.conf.d/*.conf\n" {
		t.Errorf("ld.so.conf = %q", conf)
	}
	dropin, _ := os.ReadFile(filepath.Join(root, "etc/ld.so.conf.d/00-kpreload-cdi.conf"))
	if !strings.HasSuffix(string(dropin), "\n/usr/local/nvidia/lib64\n") || strings.Contains(string(dropin), "/not/mounted") {
		t.Errorf("drop-in = %q, want /usr/local/nvidia/lib64 only", dropin)
	}
	entries, err := ReadLdcache(root, "/etc/ld.so.cache")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range entries {
		if e.Name == "libz.so.1" && e.Path == "/usr/local/nvidia/lib64/libz.so.1" {
			found = true
		}
	}
	if !found {
		t.Errorf("container cache has no libz.so.1 => /usr/local/nvidia/lib64/libz.so.1: %v", entries)
	}
	if _, err := os.Lstat(filepath.Join(root, "usr/local/nvidia/lib64/libz.so.1")); err != nil {
		t.Errorf("ldconfig made no soname link: %v", err)
	}
	// A second run adds nothing: the folder is configured now.
	if err := UpdateLdcache(root, ldconfig, []string{"/usr/local/nvidia/lib64"}); err != nil {
		t.Fatal(err)
	}
	dropin2, _ := os.ReadFile(filepath.Join(root, "etc/ld.so.conf.d/00-kpreload-cdi.conf"))
	if string(dropin2) != string(dropin) {
		t.Errorf("second run rewrote the drop-in: %q", dropin2)
	}
}

// TestUpdateLdcacheEscape: an image whose /etc/ld.so.conf.d is a link out of
// the container must not make the hook write on the host.
func TestUpdateLdcacheEscape(t *testing.T) {
	outside := t.TempDir()
	root := t.TempDir()
	write(t, filepath.Join(root, "etc/ld.so.conf"), "include /etc/ld.so.conf.d/*.conf\n")
	if err := os.MkdirAll(filepath.Join(root, "opt/lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "etc/ld.so.conf.d")); err != nil {
		t.Fatal(err)
	}
	err := UpdateLdcache(root, "/bin/true", []string{"/opt/lib"})
	if err == nil {
		t.Error("UpdateLdcache followed a link out of the container")
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("the hook wrote %d files outside the container", len(ents))
	}
	if err := UpdateLdcache("/", "/bin/true", nil); err == nil {
		t.Error("UpdateLdcache accepted / as the container root")
	}
}
