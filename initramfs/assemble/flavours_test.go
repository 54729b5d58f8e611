package assemble

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/initramfs/rootcheck"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/modalias"
	"github.com/kpreload/kpreload/live/coldplug"
	"github.com/kpreload/kpreload/testsupport/modprobetest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// flavourKernels are the Debian kernel flavours the project fetches
// (scripts/lib.sh: KPRELOAD_KERNELS and KPRELOAD_FLAVOUR_KERNELS): on the
// cloud flavours crc32c, ext4 and NVMe are built in; on the generic and rt
// ones they are modules, reached through soft dependencies and aliases.
var flavourKernels = []string{
	"6.1.0-56-cloud-amd64",
	"6.1.0-56-amd64",
	"6.1.0-56-rt-amd64",
	"6.12.118+deb13-cloud-amd64",
	"6.12.118+deb13-amd64",
}

// blockPaths are the storage stacks a root disk is reached through, as the
// modules coldplug loads for them (the transport, the driver, the disk).
// Device-mapper (dm_mod: LVM, LUKS) is not one: /init does not assemble it
// (docs/boot.md), and BootCritical does not carry it.
var blockPaths = map[string][]string{
	"virtio_blk":  {"virtio_pci", "virtio_blk"},
	"virtio_scsi": {"virtio_pci", "virtio_scsi", "sd_mod"},
	"nvme":        {"nvme"},
	"ahci":        {"ahci", "sd_mod"},
}

// TestFlavourKernelsAreFetched checks that deps.sh fetches every kernel
// TestInitramfsMatchesModprobe reads: scripts/lib.sh lists each one.
func TestFlavourKernelsAreFetched(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "scripts", "lib.sh"))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, v := range []string{"KPRELOAD_KERNELS", "KPRELOAD_FLAVOUR_KERNELS"} {
		m := regexp.MustCompile(`(?m)^\s*` + v + `=\(([^)]*)\)`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("scripts/lib.sh sets no %s=(...)", v)
		}
		listed = append(listed, strings.Fields(string(m[1]))...)
	}
	for _, k := range flavourKernels {
		if !slices.Contains(listed, k) {
			t.Errorf("kernel %s is in neither KPRELOAD_KERNELS nor KPRELOAD_FLAVOUR_KERNELS of scripts/lib.sh %v: deps.sh would not fetch it", k, listed)
		}
	}
}

// TestInitramfsMatchesModprobe is the oracle test of the initramfs's kernel
// set on every Debian flavour: for each root filesystem kpreload mounts, the
// set built for that filesystem alone (Options.Filesystems, as image builds
// use it) holds, or the kernel builds in, every module the real
// `modprobe --show-depends` inserts for the filesystem, for the requests its
// mount makes (rootcheck.Requests: fs-<type>, crypto-crc32c, vfat's code
// pages) and for each block path; kpreload's own order (modalias LoadOrder,
// LoadOrderFor) is modprobe's; every soft dependency of the set's modules,
// and every mount request, resolves from the initramfs's boot index alone
// (by name or alias, as /init resolves them) or is built in; and
// rootcheck.Check, the decision install takes, accepts the set.
func TestInitramfsMatchesModprobe(t *testing.T) {
	for _, kver := range flavourKernels {
		t.Run(kver, func(t *testing.T) {
			root := testenv.KernelTreeOrSkipShort(t, kver)
			mods := filepath.Join(root, "lib/modules", kver)
			tree, err := modalias.LoadTree(mods)
			if err != nil {
				t.Fatal(err)
			}
			oracle := map[string][]modalias.Module{}
			modprobe := func(lookup string) ([]modalias.Module, bool) {
				if m, ok := oracle[lookup]; ok {
					return m, true
				}
				steps, err := modprobetest.ShowDepends(root, kver, lookup)
				if err != nil {
					t.Errorf("%v", err)
					return nil, false
				}
				var out []modalias.Module
				seen := map[string]bool{}
				for _, s := range steps {
					if !seen[s.Name] {
						seen[s.Name] = true
						out = append(out, modalias.Module{Name: s.Name, Path: s.Path, Builtin: s.Builtin})
					}
				}
				oracle[lookup] = out
				return out, true
			}
			for _, fs := range FilesystemNames() {
				set, err := kernelSet(tree, Options{Kernel: kver, ModulesDir: mods, Filesystems: []string{fs}})
				if err != nil {
					t.Fatalf("filesystem %s: %v", fs, err)
				}
				checkSetAgainstModprobe(t, tree, set, fs, modprobe)
			}
		})
	}
}

// checkSetAgainstModprobe is TestInitramfsMatchesModprobe for one kernel
// set, built for the root filesystem fs.
func checkSetAgainstModprobe(t *testing.T, tree *modalias.Tree, set *bootindex.Set, fs string, modprobe func(string) ([]modalias.Module, bool)) {
	t.Helper()
	in := map[string]bool{}
	for _, m := range set.Modules {
		in[m.Name] = true
	}
	// The lookups: the filesystem's modules (by name), the block paths'
	// modules (by name), and what the mount requests (aliases).
	var names []string
	for _, g := range Filesystems[fs] {
		names = append(names, strings.TrimSuffix(path.Base(g), ".ko"))
	}
	for _, p := range slices.Sorted(func(yield func(string) bool) {
		for k := range blockPaths {
			if !yield(k) {
				return
			}
		}
	}) {
		for _, n := range blockPaths[p] {
			if _, ok := tree.Module(n); !ok {
				// The cloud kernels have no AHCI driver at all.
				t.Logf("block path %s: kernel has no module %s (neither loadable nor built in)", p, n)
				continue
			}
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	// What mounting fs as mkfs makes it asks for (fs-<type>, crypto-crc32c, ...).
	root, err := rootcheck.Default(fs)
	if err != nil {
		t.Fatal(err)
	}
	var requests []string
	for _, q := range rootcheck.Requests(root) {
		requests = append(requests, q.Lookup)
	}
	// A request the kernel answers with built-in code is never made
	// (crypto-crc32c on the cloud kernels: modules.alias names crc32c_intel,
	// but crc32c_generic is built in), so modprobe's modules for it are
	// compared, not required.
	check := func(lookup string, got []modalias.Module, request bool) {
		want, ok := modprobe(lookup)
		if !ok {
			return
		}
		if len(want) == 0 {
			t.Errorf("filesystem %s: modprobe --show-depends %s inserts nothing", fs, lookup)
		}
		for _, m := range want {
			if request && tree.BuiltinProvides(lookup) {
				break
			}
			if !m.Builtin && !in[m.Name] {
				t.Errorf("filesystem %s: modprobe --show-depends %s inserts %s (%s), which the initramfs lacks", fs, lookup, m.Name, m.Path)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("filesystem %s: kpreload's order for %s is\n  %v\nmodprobe --show-depends says\n  %v", fs, lookup, got, want)
		}
	}
	for _, n := range names {
		got, err := tree.LoadOrder(n)
		if err != nil {
			t.Errorf("filesystem %s: LoadOrder(%s): %v", fs, n, err)
			continue
		}
		check(n, got, false)
	}
	for _, r := range requests {
		check(r, tree.LoadOrderFor(r), true)
	}

	// What /init sees: the boot index alone, plus what the kernel builds in.
	ix := coldplug.NewIndex()
	ix.Add("/", &bootindex.Index{Format: bootindex.FormatVersion, Sets: []bootindex.Set{*set}}, nil)
	resolves := func(d string) bool {
		if len(ix.ByName(d)) > 0 || len(ix.Match(d)) > 0 {
			return true
		}
		return tree.BuiltinProvides(d)
	}
	for _, m := range set.Modules {
		for _, d := range m.SoftPre {
			if !resolves(d) {
				t.Errorf("filesystem %s: %s's soft dependency %q is neither a module of the boot index (by name or alias) nor built in", fs, m.Name, d)
			}
		}
	}
	for _, r := range requests {
		if !resolves(r) {
			t.Errorf("filesystem %s: the mount's request %q is neither a module of the boot index (by name or alias) nor built in", fs, r)
		}
	}
	// The decision install and the image builder take agrees.
	if err := rootcheck.Check(&bootindex.Index{Format: bootindex.FormatVersion, Kernel: filepath.Base(tree.Dir()), Sets: []bootindex.Set{*set}}, tree, root); err != nil {
		t.Errorf("filesystem %s: rootcheck.Check: %v", fs, err)
	}
	t.Logf("filesystem %s: %d modules in the set; %d names and %s compared with modprobe", fs, len(set.Modules), len(names), fmt.Sprint(requests))
}
