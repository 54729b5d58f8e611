package modalias

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/kpreload/kpreload/testsupport/modprobetest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// kernelTree is one unpacked kernel: ROOT/lib/modules/KVER.
type kernelTree struct {
	root, kver string
}

func (k kernelTree) dir() string { return filepath.Join(k.root, "lib/modules", k.kver) }

// kernelTrees returns the kernels of the test matrix (scripts/lib.sh's
// KPRELOAD_KERNELS under KPRELOAD_CACHE), failing when one is not unpacked.
func kernelTrees(t testing.TB) []kernelTree {
	t.Helper()
	kvers := strings.Fields(os.Getenv("KPRELOAD_KERNELS"))
	if len(kvers) == 0 {
		kvers = []string{"6.1.0-56-cloud-amd64", "6.12.117+deb12-cloud-amd64"}
	}
	var out []kernelTree
	for _, kver := range kvers {
		k := kernelTree{root: testenv.KernelTree(t, kver), kver: kver}
		if _, err := os.Stat(filepath.Join(k.dir(), "modules.dep")); err != nil {
			t.Fatalf("kernel %s is not unpacked: run scripts/kernels.sh %s (or scripts/deps.sh): %v", kver, kver, err)
		}
		out = append(out, k)
	}
	return out
}

var (
	treeCacheMu sync.Mutex
	treeCache   = map[string]*Tree{}
)

// loadKernelTree loads (once per test binary) the Tree of a real kernel.
func loadKernelTree(t testing.TB, k kernelTree) *Tree {
	t.Helper()
	treeCacheMu.Lock()
	defer treeCacheMu.Unlock()
	if tr := treeCache[k.dir()]; tr != nil {
		return tr
	}
	tr, err := LoadTree(k.dir())
	if err != nil {
		t.Fatalf("LoadTree(%s): %v", k.dir(), err)
	}
	treeCache[k.dir()] = tr
	return tr
}

// checkResolveAgainstModprobe compares Tree.Resolve with the real `modprobe -R`
// for every modalias and returns the modules modprobe named and the modaliases
// that found any. Each mismatch is reported with its modalias and kernel.
func checkResolveAgainstModprobe(t *testing.T, k kernelTree, tree *Tree, modaliases []string) (named, found []string) {
	t.Helper()
	wants, err := modprobetest.ResolveAll(k.root, k.kver, modaliases)
	if err != nil {
		t.Fatalf("kernel %s: %v", k.kver, err)
	}
	matched := 0
	for i, a := range modaliases {
		got, want := tree.Resolve(a), wants[i]
		if len(want) > 0 {
			matched++
			found = append(found, a)
		}
		if !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Errorf("kernel %s: Resolve(%q) = %q, want %q (modprobe -R)", k.kver, a, got, want)
		}
		named = append(named, want...)
	}
	t.Logf("kernel %s: %d lookups compared with modprobe -R, %d of them find modules", k.kver, len(modaliases), matched)
	return named, found
}

// checkLoadOrderAgainstModprobe compares, for each lookup, Tree.LoadOrderFor with
// the real `modprobe --show-depends` (deduplicated, first occurrence kept), and
// where the lookup is a module name that kmod finds as such, Tree.LoadOrder too.
// (A name can also be an alias: crc32 is built in, yet modprobe crc32 loads
// crc32_pclmul and crc32_generic, whose alias it is.)
func checkLoadOrderAgainstModprobe(t *testing.T, k kernelTree, tree *Tree, lookups []string) {
	t.Helper()
	wants, errs, err := modprobeShowDependsAll(k.root, k.kver, lookups)
	if err != nil {
		t.Fatalf("kernel %s: %v", k.kver, err)
	}
	for i, name := range lookups {
		if errs[i] != nil {
			t.Errorf("kernel %s: modprobe --show-depends %s: %v", k.kver, name, errs[i])
			continue
		}
		want := dedupe(wants[i])
		if got := tree.LoadOrderFor(name); !reflect.DeepEqual(got, want) {
			t.Errorf("kernel %s: LoadOrderFor(%q) =\n  %v\nwant (modprobe --show-depends)\n  %v", k.kver, name, got, want)
		}
		if r := tree.Resolve(name); len(r) != 1 || r[0] != name {
			continue
		}
		got, err := tree.LoadOrder(name)
		if err != nil {
			t.Errorf("kernel %s: LoadOrder(%q): %v", k.kver, name, err)
		} else if !reflect.DeepEqual(got, want) {
			t.Errorf("kernel %s: LoadOrder(%q) =\n  %v\nwant (modprobe --show-depends)\n  %v", k.kver, name, got, want)
		}
	}
}

// dedupe keeps the first occurrence of each module.
func dedupe(mods []Module) []Module {
	seen := map[string]bool{}
	var out []Module
	for _, m := range mods {
		if !seen[m.Name] {
			seen[m.Name] = true
			out = append(out, m)
		}
	}
	return out
}

func uniqueSorted(names []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// TestResolveMatchesModprobe is the oracle test: on both real kernel trees, every
// modalias of the captured H200 VM, of a QEMU VM and a set of other lookups must
// resolve exactly as the real modprobe -R resolves it, and every module found must
// load in the order modprobe --show-depends gives.
func TestResolveMatchesModprobe(t *testing.T) {
	lookups := fixtureModaliases(t)
	lookups = append(lookups, readLines(t, "testdata/qemu-modaliases.txt")...)
	lookups = append(lookups, readLines(t, "testdata/extra-lookups.txt")...)
	for _, k := range kernelTrees(t) {
		t.Run(k.kver, func(t *testing.T) {
			tree := loadKernelTree(t, k)
			named, found := checkResolveAgainstModprobe(t, k, tree, lookups)
			names := uniqueSorted(named)
			if len(names) < 20 {
				t.Errorf("kernel %s: modprobe found only %d distinct modules for %d lookups: %v", k.kver, len(names), len(lookups), names)
			}
			checkLoadOrderAgainstModprobe(t, k, tree, uniqueSorted(append(found, names...)))
		})
	}
}

// TestLoadOrderEveryModule compares LoadOrder with modprobe --show-depends for
// every module of both real trees, loadable and built-in (softdeps included).
func TestLoadOrderEveryModule(t *testing.T) {
	if testing.Short() {
		t.Skip("runs modprobe for every module of two kernels; not in -short mode")
	}
	for _, k := range kernelTrees(t) {
		t.Run(k.kver, func(t *testing.T) {
			tree := loadKernelTree(t, k)
			names := tree.Names()
			checkLoadOrderAgainstModprobe(t, k, tree, names)
			t.Logf("kernel %s: load order of %d modules compared with modprobe --show-depends", k.kver, len(names))
		})
	}
}

// TestLoadOrderSeveralNames checks that LoadOrder of several names is the
// deduplicated concatenation of modprobe's answers, in the order given.
func TestLoadOrderSeveralNames(t *testing.T) {
	for _, k := range kernelTrees(t) {
		tree := loadKernelTree(t, k)
		names := []string{"virtio_blk", "virtio_net", "nvme", "nfsd", "virtio_scsi"}
		var want []Module
		for _, n := range names {
			mods, err := modprobeShowDepends(k.root, k.kver, n)
			if err != nil {
				t.Fatalf("kernel %s: %v", k.kver, err)
			}
			want = append(want, mods...)
		}
		want = dedupe(want)
		got, err := tree.LoadOrder(names...)
		if err != nil {
			t.Fatalf("kernel %s: LoadOrder(%q): %v", k.kver, names, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("kernel %s: LoadOrder(%q) =\n  %v\nwant\n  %v", k.kver, names, got, want)
		}
	}
}

// TestKnownAnswers pins a few facts of the real trees, so that a tree and
// modprobe that agree on something unexpected are noticed too.
func TestKnownAnswers(t *testing.T) {
	cases := []struct {
		kver, modalias string
		want           []string
	}{
		{"6.1.0-56-cloud-amd64", "pci:v00001AF4d00001042sv00001AF4sd00001042bc01sc80i00", []string{"virtio_pci"}},
		{"6.1.0-56-cloud-amd64", "virtio:d00000002v00001AF4", []string{"virtio_blk"}},
		{"6.1.0-56-cloud-amd64", "pci:v000010DEd00002335sv000010DEsd000018BFbc03sc02i00", nil},
		{"6.1.0-56-cloud-amd64", "fs-ext4", []string{"ext4"}},
		{"6.1.0-56-cloud-amd64", "acpi:ACPI0007:", []string{"acpi_cpufreq", "pcc_cpufreq"}},
		{"6.12.117+deb12-cloud-amd64", "virtio:d00000001v00001AF4", []string{"virtio_net"}},
	}
	trees := map[string]*Tree{}
	for _, k := range kernelTrees(t) {
		trees[k.kver] = loadKernelTree(t, k)
	}
	for _, c := range cases {
		tree := trees[c.kver]
		if tree == nil {
			continue // not in this run's kernel matrix
		}
		if got := tree.Resolve(c.modalias); !reflect.DeepEqual(got, c.want) {
			t.Errorf("kernel %s: Resolve(%q) = %q, want %q", c.kver, c.modalias, got, c.want)
		}
	}
	if tr := trees["6.1.0-56-cloud-amd64"]; tr != nil {
		got, err := tr.LoadOrder("virtio_blk")
		want := []Module{
			{Name: "virtio_ring", Path: "kernel/drivers/virtio/virtio_ring.ko"},
			{Name: "virtio", Path: "kernel/drivers/virtio/virtio.ko"},
			{Name: "virtio_blk", Path: "kernel/drivers/block/virtio_blk.ko"},
		}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("LoadOrder(virtio_blk) = %v, %v; want %v", got, err, want)
		}
		if !tr.Builtin("nvme") || tr.Builtin("virtio_blk") {
			t.Errorf("Builtin(nvme), Builtin(virtio_blk) = %v, %v; want true, false", tr.Builtin("nvme"), tr.Builtin("virtio_blk"))
		}
	}
}

// TestTreeResolveVirtioBlk resolves the H200 VM's virtio block device on a 6.1
// kernel and orders virtio_blk after what it needs.
func TestTreeResolveVirtioBlk(t *testing.T) {
	const kver = "6.1.0-56-cloud-amd64"
	tree, err := LoadTree(filepath.Join(testenv.KernelTree(t, kver), "lib/modules", kver))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	got = append(got, fmt.Sprint(tree.Resolve("pci:v00001AF4d00001042sv00001AF4sd00001042bc01sc80i00")))
	order, _ := tree.LoadOrder("virtio_blk")
	for _, m := range order {
		got = append(got, m.Name+" "+m.Path)
	}
	want := []string{
		"[virtio_pci]",
		"virtio_ring kernel/drivers/virtio/virtio_ring.ko",
		"virtio kernel/drivers/virtio/virtio.ko",
		"virtio_blk kernel/drivers/block/virtio_blk.ko",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Resolve and LoadOrder(virtio_blk) = %q, want %q", got, want)
	}
}

// modprobeShowDependsAll is modprobeShowDepends of every name, asked of
// modprobe in a few runs (modprobetest.ShowDependsAll).
func modprobeShowDependsAll(root, kver string, names []string) ([][]Module, []error, error) {
	all, errs, err := modprobetest.ShowDependsAll(root, kver, names)
	if err != nil {
		return nil, nil, err
	}
	out := make([][]Module, len(all))
	for i, steps := range all {
		for _, s := range steps {
			out[i] = append(out[i], Module{Name: s.Name, Path: s.Path, Builtin: s.Builtin})
		}
	}
	return out, errs, nil
}

// modprobeShowDepends is modprobetest.ShowDepends as this package's Modules.
func modprobeShowDepends(root, kver, name string) ([]Module, error) {
	steps, err := modprobetest.ShowDepends(root, kver, name)
	if err != nil {
		return nil, err
	}
	mods := make([]Module, 0, len(steps))
	for _, s := range steps {
		mods = append(mods, Module{Name: s.Name, Path: s.Path, Builtin: s.Builtin})
	}
	return mods, nil
}
