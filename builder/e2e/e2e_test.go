package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kpreload/kpreload/testsupport/testenv"

	"github.com/kpreload/kpreload/builder/dkms"
	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/builder/rootdisk"
	"github.com/kpreload/kpreload/initramfs/assemble"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/report"
	"github.com/kpreload/kpreload/testsupport/buildtest"
)

// The kernels of scripts/lib.sh's default matrix: 6.1 (plain .ko) and 6.12
// from backports (.ko.xz, in-kernel decompression).
const (
	k61  = "6.1.0-56-cloud-amd64"
	k612 = "6.12.117+deb12-cloud-amd64"
	// k613 is trixie's cloud kernel: the test driver is built for it in a
	// trixie build root (its gcc-14 and kbuild tools).
	k613 = "6.12.118+deb13-cloud-amd64"
)

// testKernels are the test driver's matrix (recipes/testdriver.yaml).
var testKernels = []string{k61, k612, k613}

// eduID is what kpreload_edu logs when it binds QEMU's edu device: the
// device's identification register (version 1.0, 0xed).
const eduID = "bound, id 0x010000ed"

// nvidiaStore is where the nvidia-535 cell is cached between runs: the
// store under $KPRELOAD_CACHE. Reusing it is only sound because the cell's
// content key covers every input of the build (driver source digest,
// dkms.conf, kernel release, headers package version, Module.symvers and
// .config digests, the kernel's and the host's compiler, the kept modules,
// the signing key, the supported-gpus.json digest): a change to any of them
// is a new key, a miss, and a rebuild, never a stale set.
func nvidiaStore() string { return filepath.Join(downloads(), "store") }

// downloads is $KPRELOAD_CACHE (default /var/cache/kpreload): kernels,
// .debs and unpacked sources.
func downloads() string {
	if d := os.Getenv("KPRELOAD_CACHE"); d != "" {
		return d
	}
	return matrix.DefaultDownloadDir
}

// kernelRoot returns the unpacked kernel, running scripts/kernels.sh for it
// when it is not there yet.
func kernelRoot(t *testing.T, kver string) string {
	t.Helper()
	root := filepath.Join(downloads(), "kernels", kver)
	if _, err := os.Stat(filepath.Join(root, ".complete")); err != nil {
		script := filepath.Join(testenv.RepoRoot(t), "scripts", "kernels.sh")
		if out, err := exec.Command(script, kver).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", script, kver, err, out)
		}
	}
	return root
}

// cellJSON is one cell of `kpreload build --json`.
type cellJSON struct {
	Recipe     string            `json:"recipe"`
	Kernel     string            `json:"kernel"`
	State      string            `json:"state"`
	SetID      string            `json:"set_id"`
	FirstError string            `json:"first_error"`
	Log        string            `json:"log"`
	Key        map[string]string `json:"key"`
}

// kpreloadBuild runs `kpreload build --json args...` and returns its exit
// status and cells by "recipe/kernel".
func kpreloadBuild(t *testing.T, bin string, args ...string) (int, map[string]cellJSON) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"build", "--json", "--recipes", filepath.Join(testenv.RepoRoot(t), "recipes")}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("kpreload build %v: %v", args, err)
	}
	t.Logf("kpreload build %s: exit %d in %s\n%s", strings.Join(args, " "), code, time.Since(start).Round(time.Second), lastLines(stderr.String(), 12))
	var cells []cellJSON
	if err := json.Unmarshal(stdout.Bytes(), &cells); err != nil {
		t.Fatalf("kpreload build %v: --json output: %v\n%s\nstderr:\n%s", args, err, stdout.String(), stderr.String())
	}
	m := map[string]cellJSON{}
	for _, c := range cells {
		m[c.Recipe+"/"+c.Kernel] = c
	}
	return code, m
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// countingDriver counts the dkms builds it passes on.
type countingDriver struct {
	dkms.Driver
	calls atomic.Int32
}

// Build implements dkms.Driver.
func (c *countingDriver) Build(ctx context.Context, req dkms.BuildRequest) (*dkms.BuildResult, error) {
	c.calls.Add(1)
	return c.Driver.Build(ctx, req)
}

// TestBuildAndBoot is the build half end to end, in one test so the slow
// cells run once and are shared by the steps after them:
//
//  1. `kpreload build testdriver testdriver-broken.yaml:<6.12>` into a fresh
//     cache: the test driver's three cells are compiled (trixie's in its build
//     root); the cell of a copy whose source lacks a ';' fails with its real
//     compiler error, alone; the exit status is non-zero.
//  2. For each kernel, an initramfs from that cache, booted with -device edu:
//     the driver built for that kernel binds the device.
//  3. `kpreload build nvidia-535:<6.1>` into the persistent store (cached
//     across runs), its set copied into the fresh cache.
//  4. The whole successful matrix again: no dkms run, every cell cached.
//  5. 6.1 booted with the nvidia set on the root disk's cache and
//     kpreload.load=nvidia: nvidia.ko passes the checks, the kernel runs its
//     init, which fails with ENODEV (no GPU in QEMU).
func TestBuildAndBoot(t *testing.T) {
	if testing.Short() {
		t.Skip("real dkms builds and QEMU boots: skipped with -short")
	}
	buildtest.RequireTools(t, dkms.DefaultPath)
	for _, tool := range []string{"qemu-system-x86_64", "mkfs.ext4", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: run scripts/deps.sh (%v)", tool, err)
		}
	}
	for _, k := range testKernels {
		kernelRoot(t, k)
	}
	kp := staticBinary(t, "kpreload")
	initBin := staticBinary(t, "kpreload-init")
	rootInit := staticBinary(t, "kpreload-rootinit")
	work := t.TempDir()
	cache := filepath.Join(work, "cache")

	// 1. The test driver's matrix and a cell that cannot build: a copy of the
	// test driver whose source lacks a ';' (the real compiler's error).
	brokenDir := t.TempDir()
	copyDir(t, filepath.Join(testenv.RepoRoot(t), "recipes", "testdriver"), filepath.Join(brokenDir, "testdriver"))
	src := filepath.Join(brokenDir, "testdriver", "kpreload_edu.c")
	code0, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	const stmt = "edu->id = ioread32(edu->bar0 + EDU_REG_ID);"
	if !bytes.Contains(code0, []byte(stmt)) {
		t.Fatalf("%s lacks %q", src, stmt)
	}
	if err := os.WriteFile(src, bytes.Replace(code0, []byte(stmt), []byte(strings.TrimSuffix(stmt, ";")), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	yml, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "recipes", "testdriver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	brokenRecipe := filepath.Join(brokenDir, "testdriver-broken.yaml")
	if err := os.WriteFile(brokenRecipe, bytes.Replace(yml, []byte("name: testdriver\n"), []byte("name: testdriver-broken\n"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	code, cells := kpreloadBuild(t, kp, "--cache", cache, "testdriver", brokenRecipe+":"+k612)
	if code == 0 {
		t.Errorf("kpreload build with a failing cell: exit status 0, want non-zero")
	}
	if len(cells) != 4 {
		t.Errorf("kpreload build reported %d cells, want 4 (testdriver × 3, testdriver-broken × 1): %v", len(cells), cells)
	}
	edu := map[string]string{} // kernel -> set id
	for _, k := range testKernels {
		c := cells["testdriver/"+k]
		if c.State != matrix.StateOK || len(c.SetID) != 64 {
			t.Fatalf("testdriver/%s = %s %q (set %q), want ok: built into a fresh cache", k, c.State, c.FirstError, c.SetID)
		}
		edu[k] = c.SetID
	}
	if c := cells["testdriver/"+k613]; c.Key["compiler"] == "" || !strings.HasPrefix(c.Key["compiler"], "trixie build root: ") || !strings.Contains(c.Key["compiler"], "14.") {
		t.Errorf("testdriver/%s compiler %q, want trixie's gcc-14 in its build root", k613, c.Key["compiler"])
	}
	bad := cells["testdriver-broken/"+k612]
	if bad.State != matrix.StateFailed || !strings.Contains(bad.FirstError, "kpreload_edu.c") || !strings.Contains(bad.FirstError, "error:") {
		t.Errorf("testdriver-broken/%s = %s %q, want failed with kpreload_edu.c's compiler error", k612, bad.State, bad.FirstError)
	}
	if b, err := os.ReadFile(bad.Log); err != nil || !strings.Contains(string(b), bad.FirstError) {
		t.Errorf("testdriver-broken/%s log %q (%v) lacks the first error", k612, bad.Log, err)
	}
	st, err := store.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	ents, err := st.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Driver != "kpreload-edu" || edu[e.Kernel] != e.ID {
			t.Errorf("the cache holds set %.12s (%s %s for %s), want only the two test driver sets", e.ID, e.Driver, e.Version, e.Kernel)
		}
	}
	if len(ents) != 3 {
		t.Errorf("the cache holds %d sets, want 3", len(ents))
	}

	// 2. Each kernel boots its own build of the test driver.
	for _, k := range testKernels {
		t.Run("boot-testdriver-"+k, func(t *testing.T) {
			dir := t.TempDir()
			initrd := filepath.Join(dir, "initrd.img")
			if _, err := assemble.WriteFile(assemble.Options{
				Kernel: k, ModulesDir: filepath.Join(kernelRoot(t, k), "lib", "modules", k), Init: initBin, CacheDir: cache,
			}, initrd); err != nil {
				t.Fatalf("initramfs: %v", err)
			}
			res := boot(t, k, dir, initrd, rootInit, "", []string{"edu"}, "")
			m, ok := loaded(res.Report, "kpreload_edu")
			if !ok || m.Result != "loaded" || m.Set != edu[k] {
				t.Errorf("%s: kpreload_edu = %+v, want loaded from set %.12s", k, m, edu[k])
			}
			if con := console(t, res); !strings.Contains(con, eduID) {
				t.Errorf("%s: console lacks %q:\n%s", k, eduID, lastLines(con, 30))
			}
		})
	}

	// 3. nvidia-535 for 6.1, through the persistent store (see nvidiaStore).
	code, cells = kpreloadBuild(t, kp, "--cache", nvidiaStore(), "nvidia-535:"+k61)
	nv := cells["nvidia-535/"+k61]
	if code != 0 || (nv.State != matrix.StateOK && nv.State != matrix.StateCached) {
		t.Fatalf("nvidia-535/%s = exit %d, %s %q; want ok or cached", k61, code, nv.State, nv.FirstError)
	}
	if nv.Key["supported_gpus_sha256"] == "" {
		t.Errorf("nvidia-535/%s key has no supported_gpus_sha256: %v", k61, nv.Key)
	}
	nvStore, err := store.Open(nvidiaStore())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nvStore.CopySet(context.Background(), st, nv.SetID); err != nil {
		t.Fatal(err)
	}

	// 4. The whole successful matrix again, into the same cache: nothing compiles.
	t.Run("rebuild-compiles-nothing", func(t *testing.T) {
		var rs []*recipe.Recipe
		for _, name := range []string{"testdriver", "nvidia-535"} {
			r, err := recipe.Load(filepath.Join(testenv.RepoRoot(t), "recipes", name+".yaml"))
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
		}
		counter := &countingDriver{Driver: dkms.New()}
		start := time.Now()
		results, err := matrix.Run(context.Background(), matrix.Options{
			Recipes:       rs,
			RecipeKernels: map[*recipe.Recipe][]string{rs[1]: {k61}},
			CacheDir:      cache,
			TempDir:       t.TempDir(),
			LogDir:        t.TempDir(),
			Driver:        counter,
		})
		if err != nil {
			t.Fatalf("rebuild: %v", err)
		}
		t.Logf("rebuild of %d cells: %s", len(results), time.Since(start).Round(time.Millisecond))
		if n := counter.calls.Load(); n != 0 {
			t.Errorf("rebuild ran dkms %d times, want 0", n)
		}
		want := map[string]string{"testdriver/" + k61: edu[k61], "testdriver/" + k612: edu[k612], "testdriver/" + k613: edu[k613], "nvidia-535/" + k61: nv.SetID}
		if len(results) != len(want) {
			t.Errorf("rebuild has %d cells, want %d", len(results), len(want))
		}
		for _, r := range results {
			cell := r.Recipe.Name + "/" + r.Kernel
			if r.State != matrix.StateCached || r.SetID != want[cell] {
				t.Errorf("rebuild %s = %s set %.12s, want cached set %.12s", cell, r.State, r.SetID, want[cell])
			}
		}
	})

	// 5. The DKMS-built nvidia.ko on the kernel it was built for.
	t.Run("boot-nvidia-"+k61, func(t *testing.T) {
		dir := t.TempDir()
		rootCache := filepath.Join(dir, "cache")
		rc, err := store.Open(rootCache)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.CopySet(context.Background(), rc, nv.SetID); err != nil {
			t.Fatal(err)
		}
		initrd := filepath.Join(dir, "initrd.img")
		if _, err := assemble.WriteFile(assemble.Options{
			Kernel: k61, ModulesDir: filepath.Join(kernelRoot(t, k61), "lib", "modules", k61), Init: initBin,
		}, initrd); err != nil {
			t.Fatalf("initramfs: %v", err)
		}
		res := boot(t, k61, dir, initrd, rootInit, rootCache, nil, "kpreload.load=nvidia")
		for _, m := range res.Report.Modules {
			if m.Name == "nvidia" && m.Result == "refused" {
				t.Errorf("nvidia.ko was refused before the kernel saw it: %s", m.Reason)
			}
		}
		m, ok := loaded(res.Report, "nvidia")
		if !ok {
			t.Fatalf("the report has no nvidia module: %+v", res.Report.Modules)
		}
		// "failed" with an errno means finit_module ran: the vermagic and
		// digest checks passed and the kernel linked the module and ran its
		// init, which found no GPU.
		if m.Result != "failed" || m.Errno != "ENODEV" || m.Set != nv.SetID || m.Phase != "rootfs" {
			t.Errorf("nvidia = %+v, want failed with ENODEV from set %.12s in the rootfs phase", m, nv.SetID)
		}
		if con := console(t, res); !strings.Contains(con, "NVRM: No NVIDIA GPU found.") {
			t.Errorf("console lacks NVRM: No NVIDIA GPU found.:\n%s", lastLines(con, 30))
		}
	})
}

// boot boots kernel kver with initrd and a root disk whose /sbin/init is
// rootInit (and whose /var/lib/kpreload/cache is rootCache, if set), the
// given extra devices and kernel parameters, and returns the result with
// /init's report and the root init's record.
func boot(t *testing.T, kver, dir, initrd, rootInit, rootCache string, devices []string, params string) *qemu.Result {
	t.Helper()
	extra := map[string]string{}
	if rootCache != "" {
		extra["/var/lib/kpreload/cache"] = rootCache
	}
	disk := filepath.Join(dir, "root.img")
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 2*time.Minute))
	defer cancel()
	if err := rootdisk.Build(ctx, rootdisk.Options{Out: disk, Init: rootInit, UUID: "7c1e2d3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f", Extra: extra}); err != nil {
		t.Fatalf("root disk: %v", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), testenv.Deadline(t, 6*time.Minute))
	defer cancel()
	res, err := qemu.Run(ctx, qemu.Config{
		Kernel:     filepath.Join(kernelRoot(t, kver), "boot", "vmlinuz-"+kver),
		Initramfs:  initrd,
		RootDisk:   disk,
		Devices:    devices,
		Append:     params,
		Memory:     2048,
		Timeout:    testenv.Deadline(t, 5*time.Minute),
		ConsoleLog: filepath.Join(dir, "console.log"),
	})
	if err != nil {
		t.Fatalf("boot %s: %v", kver, err)
	}
	if res.Report == nil {
		t.Fatalf("boot %s: no report from /init; console:\n%s", kver, lastLines(console(t, res), 30))
	}
	if res.RootInit == nil {
		t.Errorf("boot %s: the root's /sbin/init never reported: userspace was not reached", kver)
	}
	t.Logf("boot %s in %s: %s", kver, res.Duration.Round(100*time.Millisecond), res.Report.Summary())
	return res
}

// loaded returns the report's entry for module name that is not a refusal
// when there is one, else any entry for it.
func loaded(rep *report.Report, name string) (report.Module, bool) {
	var found *report.Module
	for i, m := range rep.Modules {
		if m.Name != name {
			continue
		}
		if m.Result != "refused" {
			return m, true
		}
		found = &rep.Modules[i]
	}
	if found != nil {
		return *found, true
	}
	return report.Module{}, false
}

// console reads the boot's console log.
func console(t *testing.T, res *qemu.Result) string {
	t.Helper()
	b, err := os.ReadFile(res.Console)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// copyDir copies the regular files of src (one level, as the test driver's
// source is) into dst, following links.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
