// Package e2e boots real Debian cloud kernels in QEMU with kpreload initramfs
// images and checks what the booted machine saw. Everything is real: the kernels
// and headers from Debian's archive, the test driver built by the real dkms, QEMU.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kpreload/kpreload/testsupport/testenv"

	"github.com/kpreload/kpreload/builder/dkms"
	"github.com/kpreload/kpreload/builder/rootdisk"
	"github.com/kpreload/kpreload/initramfs/assemble"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// Kernels are the two kernels the boot path is proven on: 6.1 (plain .ko, virtio
// as modules) and 6.12 from backports (.ko.xz, in-kernel decompression).
var kernels = []string{"6.1.0-56-cloud-amd64", "6.12.117+deb12-cloud-amd64"}

// binaries builds the static /init and the root filesystem's test init once
// per test process.
func binaries(t testing.TB) (initBin, rootInit string) {
	t.Helper()
	return testenv.StaticBinary(t, "kpreload-init", "./cmd/kpreload-init"), testenv.StaticBinary(t, "kpreload-rootinit", "./cmd/kpreload-rootinit")
}

// kpreloadBinary builds the static kpreload CLI once per test run (as `make
// build` does), for the tests that build module caches with `kpreload build`.
func kpreloadBinary(t testing.TB) string {
	t.Helper()
	return testenv.StaticBinary(t, "kpreload", "./cmd/kpreload")
}

var eduBuilds sync.Map // kver+"/"+version -> path

// eduModule returns the path of the project's test driver, kpreload_edu.ko,
// built for kver with the real dkms (once per kernel and version). For
// kernels[0] at the recipe's own version it is the module of twoVersions'
// 1.0.0 set (`kpreload build` ran the real dkms for it), not a second dkms
// build of the same source for the same kernel.
func eduModule(t testing.TB, kver, version string) string {
	t.Helper()
	key := kver + "/" + version
	if p, ok := eduBuilds.Load(key); ok {
		return p.(string)
	}
	if kver == kernels[0] && version == "" {
		p := moduleFromCache(t, twoVersions(t, kver), "1.0.0")
		eduBuilds.Store(key, p)
		return p
	}
	root := testenv.KernelTree(t, kver)
	src := filepath.Join(testenv.RepoRoot(t), "recipes", "testdriver")
	work, err := os.MkdirTemp("", "kpreload-e2e-dkms-")
	if err != nil {
		t.Fatal(err)
	}
	if version != "" {
		copyDir := filepath.Join(work, "src")
		if out, err := exec.Command("cp", "-r", src, copyDir).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v %s", err, out)
		}
		conf := filepath.Join(copyDir, "dkms.conf")
		b, err := os.ReadFile(conf)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "PACKAGE_VERSION=") {
				l = `PACKAGE_VERSION="` + version + `"`
			}
			lines = append(lines, l)
		}
		if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		src = copyDir
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 10*time.Minute))
	defer cancel()
	res, err := dkms.New().Build(ctx, dkms.BuildRequest{
		SourceDir:       src,
		Kernel:          kver,
		KernelSourceDir: filepath.Join(root, "usr", "src", "linux-headers-"+kver),
		WorkDir:         filepath.Join(work, "dkms"),
		Jobs:            2,
	})
	if err != nil {
		t.Fatalf("dkms build of the test driver for %s: %v", kver, err)
	}
	mods, err := dkms.CopyModules(res, filepath.Join(work, "out"))
	if err != nil || len(mods) != 1 {
		t.Fatalf("copy built modules: %v (%v)", err, mods)
	}
	eduBuilds.Store(key, mods[0])
	return mods[0]
}

var (
	initrdMu  sync.Mutex
	initrdDir string
	initrds   = map[string]string{} // assemble.Options, printed -> initramfs
)

// sharedInitramfs writes the initramfs o describes once per test run and
// returns its path: boots whose initramfs is the same (kernel, /init, cache,
// extra modules, index marked complete or not) share one file, which QEMU
// only reads. TestMain removes them. The key is the options as printed, so
// the files and directories they name must not change during the run (the
// callers' are per-test temporary paths or the run's shared, finished caches),
// and Root, a pointer whose printed address says nothing of its content, must
// be nil.
func sharedInitramfs(t testing.TB, o assemble.Options) string {
	t.Helper()
	if o.Root != nil {
		t.Fatal("sharedInitramfs: Options.Root is a pointer; its address is no key for the initramfs")
	}
	key := fmt.Sprintf("%#v", o)
	initrdMu.Lock()
	defer initrdMu.Unlock()
	if p, ok := initrds[key]; ok {
		return p
	}
	if initrdDir == "" {
		d, err := os.MkdirTemp("", "kpreload-e2e-initrd-")
		if err != nil {
			t.Fatal(err)
		}
		initrdDir = d
	}
	p := filepath.Join(initrdDir, fmt.Sprintf("initrd-%d.img", len(initrds)))
	if _, err := assemble.WriteFile(o, p); err != nil {
		t.Fatalf("initramfs: %v", err)
	}
	initrds[key] = p
	return p
}

// rootDisk builds an ext4 root disk whose /sbin/init is the test init, with extra
// host directories copied in (dest -> src).
func rootDisk(t testing.TB, dir, uuid string, extra map[string]string) string {
	t.Helper()
	_, rootInit := binaries(t)
	img := filepath.Join(dir, "root.img")
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 2*time.Minute))
	defer cancel()
	if err := rootdisk.Build(ctx, rootdisk.Options{Out: img, SizeMB: 64, UUID: uuid, Label: "kpreload-root", Init: rootInit, Extra: extra}); err != nil {
		t.Fatalf("root disk: %v", err)
	}
	return img
}

// moduleFromCache copies the one module of version's set in a module cache
// out under its own file name (kpreload_edu.ko) and returns the copy's path.
func moduleFromCache(t testing.TB, cache, version string) string {
	t.Helper()
	st, err := store.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	ents, err := st.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Version != version {
			continue
		}
		m, err := st.Get(e.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Modules) != 1 {
			t.Fatalf("set %s of version %s in %s holds %d modules, want the test driver's one", e.ID, version, cache, len(m.Modules))
		}
		b, err := os.ReadFile(st.ObjectPath(m.Modules[0].SHA256))
		if err != nil {
			t.Fatal(err)
		}
		dir, err := os.MkdirTemp(filepath.Dir(cache), "edu-")
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, filepath.Base(m.Modules[0].File))
		if err := os.WriteFile(out, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return out
	}
	t.Fatalf("no set of version %s in %s", version, cache)
	return ""
}
