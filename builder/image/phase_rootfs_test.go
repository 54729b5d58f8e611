package image

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/image/rootfs"
)

func TestRootfsKey(t *testing.T) {
	o := Options{Kernels: []string{"6.1.0-56-cloud-amd64"}}.Resolve()
	base := rootfsSpec(o, "2025-01-01")
	if !slices.Contains(base.Packages, "linux-image-6.1.0-56-cloud-amd64") || !slices.Contains(base.Packages, "systemd-sysv") {
		t.Fatalf("packages = %v, want the kernel and systemd-sysv", base.Packages)
	}
	k := rootfs.Key(base)
	if rootfs.Key(rootfsSpec(o, "2025-01-01")) != k {
		t.Error("same inputs gave different keys")
	}
	o2 := o
	o2.Rootfs.Packages = []string{"curl"}
	o3 := o
	o3.Rootfs.Mirror = "http://example.org/debian"
	for name, spec := range map[string]rootfs.Spec{
		"another day":     rootfsSpec(o, "2025-01-02"),
		"another package": rootfsSpec(o2, "2025-01-01"),
		"another mirror":  rootfsSpec(o3, "2025-01-01"),
	} {
		if rootfs.Key(spec) == k {
			t.Errorf("%s: key unchanged", name)
		}
	}
	args := rootfs.MmdebstrapArgs(base, "/tmp/x/kpreload-initramfs-tool.deb", "/out.tar")
	joined := strings.Join(args, "\n")
	for _, want := range []string{"--variant=minbase", "linux-image-6.1.0-56-cloud-amd64", "/tmp/x/kpreload-initramfs-tool.deb", "bookworm-backports", "bookworm-security", "/out.tar"} {
		if !strings.Contains(joined, want) {
			t.Errorf("mmdebstrap args lack %q:\n%s", want, joined)
		}
	}
}

// TestRootfsPhase runs the rootfs phase: mmdebstrap's tarball is unpacked
// into the work directory's root, the kernel's package version recorded, the
// tarball kept in the rootfs cache; its cleanup removes the root.
func TestRootfsPhase(t *testing.T) {
	f := &fakeRunner{}
	j, o := fakeJob(t, f, nil)
	if err := runThrough(t, j, PhaseRootfs); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(j.root, "etc/shadow")); err != nil {
		t.Errorf("the root is not unpacked: %v", err)
	}
	if got, want := j.m.KernelPackages[testKernel], "6.1.158-1"; got != want {
		t.Errorf("kernel package version = %q, want %q", got, want)
	}
	if j.m.Rootfs.Cached || len(f.ran("mmdebstrap")) != 1 {
		t.Errorf("cached = %v, mmdebstrap ran %q; want one mmdebstrap run", j.m.Rootfs.Cached, f.ran("mmdebstrap"))
	}
	if ents := dirEntries(t, o.Rootfs.CacheDir); len(ents) == 0 {
		t.Errorf("no tarball kept in the rootfs cache")
	}
	j.cleanupRootfs(false)
	if _, err := os.Lstat(j.root); !os.IsNotExist(err) {
		t.Errorf("the root is still there after the cleanup (%v)", err)
	}
}
