package matrix

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"

	"github.com/kpreload/kpreload/builder/dkms"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// hostileEnv, when set, makes TestReproducibleOnHostileHost the child half:
// it runs in a mount namespace of its own (unshare), makes that namespace a
// hostile build host and builds there. Its value is a JSON hostileJob.
const hostileEnv = "KPRELOAD_TEST_HOSTILE_HOST"

// hostileJob is what the parent asks of the child.
type hostileJob struct {
	Kernel, Cache, Temp, Scratch string
}

// reproKernel ships compressed modules (.ko.xz in its modules.dep): the
// kernel that made dkms compress on hosts that have it installed.
const reproKernel = "6.12.117+deb12-cloud-amd64"

// TestReproducibleOnHostileHost builds the test driver's cell for one kernel
// twice, into two empty caches with different temporary directories: once
// on this host, once in a mount namespace of the test's own where that
// kernel is installed system-wide (its modules.dep, headers and kbuild where
// Debian's packages put them) and dkms is configured against kpreload (a
// framework.conf whose sign_file rewrites modules, an /etc/dkms override
// that turns stripping off). A plain dkms build there, the control, picks
// all of that up (.ko.xz, the rewritten bytes); kpreload's build must give
// the same key and byte-identical modules as on this host.
func TestReproducibleOnHostileHost(t *testing.T) {
	if job := os.Getenv(hostileEnv); job != "" {
		hostileChild(t, job)
		return
	}
	requireTools(t)
	requireKernels(t)
	if os.Geteuid() != 0 {
		t.Fatal("this test arranges a hostile build host in a mount namespace of its own: it needs root (the build's own sandbox does too)")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatalf("unshare (util-linux) is needed: %v", err)
	}

	// This host's build: TestRealMatrix's, in a TempDir of its own, when it ran.
	hereCache := filepath.Join(t.TempDir(), "cache")
	testdriverCell(t, reproKernel, hereCache, t.TempDir())
	here := readRepro(t, hereCache)

	job := hostileJob{
		Kernel:  reproKernel,
		Cache:   filepath.Join(t.TempDir(), "cache"),
		Temp:    filepath.Join(t.TempDir(), "a", "different", "temporary", "directory"),
		Scratch: t.TempDir(),
	}
	if err := os.MkdirAll(job.Temp, 0o755); err != nil {
		t.Fatal(err)
	}
	spec, _ := json.Marshal(job)
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--",
		os.Args[0], "-test.run=^TestReproducibleOnHostileHost$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), hostileEnv+"="+string(spec))
	out, err := cmd.CombinedOutput()
	t.Logf("the hostile host (its own mount namespace):\n%s", out)
	if err != nil {
		t.Fatalf("the build on the hostile host failed: %v", err)
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(b), job.Scratch) {
		t.Fatalf("the hostile host's mounts leaked into this namespace")
	}

	there := readRepro(t, job.Cache)
	if !maps.Equal(here.key, there.key) {
		t.Errorf("keys differ:\n here  %v\n there %v", here.key, there.key)
	}
	if here.set != there.set {
		t.Errorf("set digests differ: here %s, there %s", here.set, there.set)
	}
	if len(here.modules) != 1 || len(there.modules) != 1 {
		t.Fatalf("modules here %v, there %v; want one kpreload_edu.ko each", here.modules, there.modules)
	}
	for name, a := range here.modules {
		b := there.modules[name]
		if !bytes.Equal(a, b) {
			t.Errorf("%s: %d bytes here, %d on the hostile host: not the same bytes", name, len(a), len(b))
		}
	}
}

// repro is one build's outcome: its key, set digest and module bytes.
type repro struct {
	key     map[string]string
	set     string
	modules map[string][]byte
}

// buildRepro builds the test driver for reproKernel into an empty cache.
func buildRepro(t *testing.T, cache, temp string) repro {
	t.Helper()
	buildTestdriver(t, reproKernel, cache, temp)
	return readRepro(t, cache)
}

// readRepro reads the one set of a cache.
func readRepro(t *testing.T, cache string) repro {
	t.Helper()
	st, err := store.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := st.List()
	if err != nil || len(entries) != 1 {
		t.Fatalf("cache %s: %d sets (%v), want 1", cache, len(entries), err)
	}
	m, err := st.Get(entries[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	out := repro{key: m.CacheKey, set: entries[0].ID, modules: map[string][]byte{}}
	for _, mod := range m.Modules {
		if out.modules[mod.File], err = os.ReadFile(st.ObjectPath(mod.SHA256)); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// hostileChild is the child half: in its own mount namespace it installs
// reproKernel system-wide and configures dkms against kpreload, proves with
// a plain dkms build that this host changes what dkms makes, then builds the
// cell with kpreload into job.Cache.
func hostileChild(t *testing.T, spec string) {
	var job hostileJob
	if err := json.Unmarshal([]byte(spec), &job); err != nil {
		t.Fatalf("%s: %v", hostileEnv, err)
	}
	kver, kroot := job.Kernel, filepath.Join(downloadDir(), "kernels", job.Kernel)
	scratch := job.Scratch
	mount := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			t.Fatalf("mount %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	mkdir := func(p string) {
		t.Helper()
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, text string, perm os.FileMode) {
		t.Helper()
		if err := os.WriteFile(p, []byte(text), perm); err != nil {
			t.Fatal(err)
		}
	}
	// The kernel, installed as its packages install it: /usr/lib writable
	// through an overlay (this namespace only), its modules.* files and
	// build link under /usr/lib/modules/<kver>, kbuild under /usr/lib, the
	// headers under /usr/src.
	for _, d := range []string{"upper", "work"} {
		mkdir(filepath.Join(scratch, "usrlib", d))
	}
	mount("-t", "overlay", "overlay", "-o", "lowerdir=/usr/lib,upperdir="+filepath.Join(scratch, "usrlib", "upper")+",workdir="+filepath.Join(scratch, "usrlib", "work"), "/usr/lib")
	mods := filepath.Join("/usr/lib/modules", kver)
	mkdir(mods)
	ents, _ := filepath.Glob(filepath.Join(kroot, "lib", "modules", kver, "modules.*"))
	for _, f := range ents {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		write(filepath.Join(mods, filepath.Base(f)), string(data), 0o644)
	}
	if dep, _ := os.ReadFile(filepath.Join(mods, "modules.dep")); !bytes.Contains(dep, []byte(".ko.xz:")) {
		t.Fatalf("%s/modules.dep names no .ko.xz module: this kernel would not make dkms compress", mods)
	}
	if err := os.Symlink("/usr/src/linux-headers-"+kver, filepath.Join(mods, "build")); err != nil {
		t.Fatal(err)
	}
	kbuilds, _ := filepath.Glob(filepath.Join(kroot, "usr", "lib", "linux-kbuild-*"))
	for _, kb := range kbuilds {
		dst := filepath.Join("/usr/lib", filepath.Base(kb))
		mkdir(dst)
		mount("--bind", kb, dst)
	}
	mount("-t", "tmpfs", "tmpfs", "/usr/src")
	heads, _ := filepath.Glob(filepath.Join(kroot, "usr", "src", "linux-headers-*"))
	for _, h := range heads {
		dst := filepath.Join("/usr/src", filepath.Base(h))
		mkdir(dst)
		mount("--bind", h, dst)
	}

	// dkms configured against kpreload: a sign_file that rewrites every
	// module it is given, and an override that keeps debug information.
	mount("-t", "tmpfs", "tmpfs", "/etc/dkms")
	mount("-t", "tmpfs", "tmpfs", "/var/lib/dkms")
	sign := filepath.Join(scratch, "hostile-sign-file")
	write(sign, "#!/bin/sh\nprintf 'HOSTILE-SIGN-FILE' >> \"$4\"\n", 0o755)
	write(filepath.Join(scratch, "key"), "not a key\n", 0o600)
	write("/etc/dkms/framework.conf", fmt.Sprintf("sign_file=%q\nmok_signing_key=%q\nmok_certificate=%q\n", sign, filepath.Join(scratch, "key"), filepath.Join(scratch, "key")), 0o644)
	write("/etc/dkms/kpreload-edu.conf", "STRIP[0]=no\n", 0o644)

	// The control: plain dkms on this host, as a user would run it.
	copyTree(t, filepath.Join(testenv.RepoRoot(t), "recipes", "testdriver"), "/usr/src/kpreload-edu-1.0.0")
	control := exec.Command(dkms.DefaultPath, "build", "-m", "kpreload-edu", "-v", "1.0.0", "-k", kver)
	control.Env = append(os.Environ(), "MAKEFLAGS=CC=x86_64-linux-gnu-gcc-12")
	if out, err := control.CombinedOutput(); err != nil {
		t.Fatalf("the control (plain dkms build on this host): %v\n%s", err, out)
	}
	xz := filepath.Join("/var/lib/dkms/kpreload-edu/1.0.0", kver, "x86_64/module/kpreload_edu.ko.xz")
	plain, err := exec.Command("xz", "-dc", xz).Output()
	if err != nil {
		t.Fatalf("the control made no %s (%v): this host did not make dkms compress", xz, err)
	}
	if !bytes.HasSuffix(plain, []byte("HOSTILE-SIGN-FILE")) {
		t.Fatalf("the control's module does not end in the hostile sign_file's bytes: framework.conf did not reach dkms")
	}
	t.Logf("control: plain dkms here made %s (%d bytes unpacked, rewritten by the host's sign_file, not stripped)", filepath.Base(xz), len(plain))

	// kpreload's build on the same host.
	buildRepro(t, job.Cache, job.Temp)
	t.Logf("kpreload's build on the hostile host: cache %s", job.Cache)
}
