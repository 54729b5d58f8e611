package image

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/image/bootloader"
	"github.com/kpreload/kpreload/builder/image/disk"
	"github.com/kpreload/kpreload/builder/image/formats"
	"github.com/kpreload/kpreload/builder/image/rootfs"
	"github.com/kpreload/kpreload/builder/image/stage"
	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// The systemd-boot image that TestBuildAndBootImage checks as built and
// TestCloudInitImage boots is built once per test run (ciImage): one
// mmdebstrap root, one staging, one disk and its conversions serve both,
// and the podman CDI check runs in the first cloud-init instance's boot
// rather than in a boot of its own.

// ciImageSizeMB is the shared image's disk size: its root (about 650 MB with
// podman and crun) with room to spare, and no more: every digest, conversion
// and comparison of the disk reads all of it, its empty part included.
const ciImageSizeMB = 1024

// ciCmdline is the shared image's kernel command line.
const ciCmdline = "console=ttyS0 panic=-1 kpreload.report=" + qemu.ReportDevice

// ciRootfsOptions are the options that decide the shared image's mmdebstrap
// root (rootfsSpec): TestKernelInstallPlugin takes the same root, so a run
// makes (or takes from the day's rootfs cache) one tarball for both.
func ciRootfsOptions() Options {
	return Options{Kernels: []string{testKernel}, Rootfs: rootfs.Options{CloudInit: true, Packages: []string{"podman", "crun"}}}
}

// ciBuild is the shared image: the output directory and what Build returned.
type ciBuild struct {
	out  string
	m    *Manifest
	took time.Duration
}

var (
	ciOnce sync.Once
	ciDir  string
	ciImg  ciBuild
	ciErr  error
)

// ciImage builds, once per test run, the shared image "ci": both versions of
// the test driver, each with its userspace built from C; an instance YAML
// asking for 1.0.0; cloud-init with the clouds' datasources; Debian's podman
// and crun with the podman CDI check's script and configuration (run by the
// first cloud-init instance's user-data), the units the podman package
// enables masked (podmanMaskedUnits); written raw, as qcow2, as a
// streamOptimized VMDK and a fixed VHD.
func ciImage(t *testing.T) ciBuild {
	t.Helper()
	ciOnce.Do(func() {
		cache, recipes := bothVersionsCache(t)
		kpreload, initBin := binaries(t)
		if ciDir, ciErr = os.MkdirTemp("", "kpreload-image-ci-"); ciErr != nil {
			return
		}
		files := filepath.Join(ciDir, "files")
		tmp := filepath.Join(ciDir, "tmp")
		out := filepath.Join(ciDir, "out")
		for _, d := range []string{files, tmp, out} {
			if ciErr = os.MkdirAll(d, 0o755); ciErr != nil {
				return
			}
		}
		write := func(name, content string, mode os.FileMode) string {
			p := filepath.Join(files, name)
			if err := os.WriteFile(p, []byte(content), mode); err != nil && ciErr == nil {
				ciErr = err
			}
			return p
		}
		instance := write("instance.yaml", "# kpreload instance for the image test\nresources:\n  driver:\n    version: \"1.0.0\"\n", 0o644)
		o := ciRootfsOptions()
		o.Name, o.OutDir, o.Stage.Recipes, o.Stage.CacheDir = "ci", out, recipes, cache
		o.Stage.BuildMissing, o.Stage.Instance, o.Disk = true, instance, disk.Options{SizeMB: ciImageSizeMB, ESPSizeMB: 128}
		o.Formats = []string{formats.Raw, formats.QCOW2, formats.VMDK, formats.VHD}
		o.Rootfs.Files = map[string]string{
			podmanScriptPath:                  write("script", podmanScript, 0o755),
			"/etc/containers/containers.conf": write("containers.conf", containersConf, 0o644),
			"/etc/containers/storage.conf":    write("storage.conf", storageConf, 0o644),
		}
		for _, u := range podmanMaskedUnits {
			o.Rootfs.Files["/etc/systemd/system/"+u] = write("masked-"+u, "", 0o644)
		}
		o.Boot.Cmdline = ciCmdline
		o.Stage.KpreloadBinary, o.Stage.InitBinary, o.TempDir = kpreload, initBin, tmp
		if ciErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 40*time.Minute))
		defer cancel()
		start := time.Now()
		o.Progress = func(msg string) { t.Logf("[%6.1fs] ci image: %s", time.Since(start).Seconds(), msg) }
		m, err := Build(ctx, o)
		if err != nil {
			ciErr = fmt.Errorf("build the shared image: %w", err)
			return
		}
		ciImg = ciBuild{out: out, m: m, took: time.Since(start)}
		t.Logf("shared image built in %s (rootfs tarball cached: %v; once for the package's tests)", ciImg.took.Round(time.Second), m.Rootfs.Cached)
	})
	if ciErr == nil && ciImg.m == nil {
		ciErr = fmt.Errorf("the shared image was not built: the test that began it failed first")
	}
	if ciErr != nil {
		t.Fatal(ciErr)
	}
	return ciImg
}

// trixieKernel is Debian 13's cloud kernel, which the trixie cloud-init
// image boots.
const trixieKernel = "6.12.118+deb13-cloud-amd64"

var (
	ciTrixieOnce sync.Once
	ciTrixieImg  ciBuild
	ciTrixieErr  error
)

// ciTrixieImage builds, once per test run, a trixie image with cloud-init
// (Debian 13's, whose schema check is strict) and both versions of the test
// driver (their cells built for trixie's kernel in its build root, into the
// same cache as bothVersionsCache's), whose own instance file asks for
// 1.0.0: as little as TestCloudInitImage's trixie instance needs (no podman,
// raw only).
func ciTrixieImage(t *testing.T) ciBuild {
	t.Helper()
	ciTrixieOnce.Do(func() {
		cache, both := bothVersionsCache(t)
		// testdriver-2's matrix stops at bookworm's kernels: its trixie cell
		// is this image's alone, asked for here rather than by every build.
		var recipes []*recipe.Recipe
		for _, r := range both {
			c := *r
			if !slices.Contains(c.Kernels.Releases, trixieKernel) {
				c.Kernels.Releases = append(slices.Clone(c.Kernels.Releases), trixieKernel)
			}
			recipes = append(recipes, &c)
		}
		kpreload, initBin := binaries(t)
		dir, err := os.MkdirTemp("", "kpreload-image-ci-trixie-")
		if err != nil {
			ciTrixieErr = err
			return
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		instance := filepath.Join(dir, "instance.yaml")
		if ciTrixieErr = os.WriteFile(instance, []byte("resources:\n  driver:\n    version: \"1.0.0\"\n"), 0o644); ciTrixieErr != nil {
			return
		}
		out := filepath.Join(dir, "out")
		o := Options{Name: "ci-trixie", OutDir: out, Kernels: []string{trixieKernel},
			Rootfs: rootfs.Options{Suite: "trixie", CloudInit: true},
			Stage: stage.Options{
				Recipes: recipes, CacheDir: cache, BuildMissing: true, Instance: instance,
				KpreloadBinary: kpreload, InitBinary: initBin,
			},
			Boot: bootloader.Options{Cmdline: ciCmdline}, Disk: disk.Options{SizeMB: ciImageSizeMB, ESPSizeMB: 128},
			Formats: []string{formats.Raw}, TempDir: dir}
		ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 40*time.Minute))
		defer cancel()
		start := time.Now()
		o.Progress = func(msg string) { t.Logf("[%6.1fs] ci-trixie image: %s", time.Since(start).Seconds(), msg) }
		m, err := Build(ctx, o)
		if err != nil {
			ciTrixieErr = fmt.Errorf("build the trixie cloud-init image: %w", err)
			return
		}
		ciTrixieImg = ciBuild{out: out, m: m, took: time.Since(start)}
	})
	if ciTrixieErr == nil && ciTrixieImg.m == nil {
		ciTrixieErr = fmt.Errorf("the trixie cloud-init image was not built: the test that began it failed first")
	}
	if ciTrixieErr != nil {
		t.Fatal(ciTrixieErr)
	}
	return ciTrixieImg
}
