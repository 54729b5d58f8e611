package install

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/internal/versort"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
)

// Kernel is what a root holds for one kernel release.
type Kernel struct {
	// Release is the kernel release (uname -r).
	Release string `json:"release"`
	// Image is true when boot/vmlinuz-<release> exists.
	Image bool `json:"image"`
	// Modules is true when lib/modules/<release>/modules.dep exists.
	Modules bool `json:"modules"`
	// Initramfs is true when kpreload's initramfs for the kernel exists.
	Initramfs bool `json:"kpreload_initramfs"`
	// DistInitramfs is true when the distribution's boot/initrd.img-<release> exists.
	DistInitramfs bool `json:"distribution_initramfs"`
	// Drivers are the driver versions the root's module cache holds for the
	// kernel, one entry a version with the flavours of its sets:
	// "nvidia 550.163.01 (open, proprietary)".
	Drivers []string `json:"drivers,omitempty"`
	// Sets are the driver sets themselves, one a flavour, in the index's order.
	Sets []Set `json:"sets,omitempty"`
	// IndexError says why the root's boot index for the kernel was
	// refused (a bad format, a name outside the grammar, not a regular
	// file); empty when it was read or there is none. A refused index
	// counts as no driver cells.
	IndexError string `json:"index_error,omitempty"`
}

// Set is one driver set of a kernel's boot index.
type Set struct {
	ID      string `json:"id"`
	Driver  string `json:"driver"`
	Version string `json:"version"`
	Flavor  string `json:"flavor,omitempty"`
}

// Bootable reports whether kpreload can boot the kernel: its image and
// kpreload's initramfs are both there.
func (k Kernel) Bootable() bool { return k.Image && k.Initramfs }

// Kernels lists the kernels a root holds (an image in boot/ or a module
// tree in lib/modules/), newest first (as sort -V orders releases).
func Kernels(root string) ([]Kernel, error) {
	seen := map[string]bool{}
	add := func(name string) {
		if CheckRelease(name) == nil {
			seen[name] = true
		}
	}
	boot, err := inroot.ReadDir(root, "boot")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list kernels: %w", err)
	}
	for _, e := range boot {
		if r, ok := strings.CutPrefix(e.Name(), "vmlinuz-"); ok {
			add(r)
		}
	}
	mods, err := inroot.ReadDir(root, "lib/modules")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list kernels: %w", err)
	}
	for _, e := range mods {
		if e.IsDir() || e.Type()&fs.ModeSymlink != 0 {
			add(e.Name())
		}
	}
	var out []Kernel
	for r := range seen {
		out = append(out, kernelState(root, r))
	}
	slices.SortFunc(out, func(a, b Kernel) int { return versort.Compare(b.Release, a.Release) })
	return out, nil
}

// exists reports whether name is in the tree at root (links followed inside it).
func exists(root, name string) bool { _, err := inroot.Stat(root, name); return err == nil }

// kernelState reads what root holds for one kernel.
func kernelState(root, release string) Kernel {
	k := Kernel{
		Release:       release,
		Image:         exists(root, KernelImagePath(release)),
		Modules:       exists(root, path.Join("lib/modules", release, "modules.dep")),
		Initramfs:     exists(root, InitramfsPath(release)),
		DistInitramfs: exists(root, "boot/initrd.img-"+release),
	}
	if ix, err := ReadIndex(root, release); err == nil {
		for _, s := range ix.Sets {
			if s.ID == bootindex.KernelSetID {
				continue
			}
			k.Sets = append(k.Sets, Set{ID: s.ID, Driver: s.Driver, Version: s.Version, Flavor: s.Flavor})
		}
		k.Drivers = driverVersions(k.Sets)
	} else if !errors.Is(err, fs.ErrNotExist) {
		k.IndexError = err.Error()
	}
	return k
}

// DefaultKernel picks the kernel kpreload boots by default: the newest
// bootable kernel whose driver cells the root's cache holds, else (newest
// set, or no kernel has cells) the newest bootable kernel. kernels must be
// newest first, as Kernels returns them; "" when none is bootable.
func DefaultKernel(kernels []Kernel, newest bool) string {
	if !newest {
		for _, k := range kernels {
			if k.Bootable() && len(k.Drivers) > 0 {
				return k.Release
			}
		}
	}
	for _, k := range kernels {
		if k.Bootable() {
			return k.Release
		}
	}
	return ""
}

// ReadIndex reads the boot index of release in root's module cache, inside
// root, through bootindex.ReadIn (its format and the name grammar checked);
// the index must be for release.
func ReadIndex(root, release string) (*bootindex.Index, error) {
	if err := CheckRelease(release); err != nil {
		return nil, err
	}
	name := path.Join(CacheDir, bootindex.IndexDir, release+".json")
	ix, err := bootindex.ReadIn(root, name)
	if err != nil {
		return nil, err
	}
	if ix.Kernel != release {
		return nil, fmt.Errorf("boot index %s: kernel %q, want %q", inroot.Host(root, name), ix.Kernel, release)
	}
	return ix, nil
}

// driverVersions lists sets one entry a driver version, in the order each
// version first appears, with the flavours of its sets in parentheses
// ("nvidia 550.163.01 (open, proprietary)"); a version whose sets name no
// flavour is "driver version" alone.
func driverVersions(sets []Set) []string {
	var order []string
	flavors := map[string][]string{}
	for _, s := range sets {
		key := s.Driver + " " + s.Version
		fl, seen := flavors[key]
		if !seen {
			order = append(order, key)
			flavors[key] = []string{}
		}
		if s.Flavor != "" && !slices.Contains(fl, s.Flavor) {
			flavors[key] = append(fl, s.Flavor)
		}
	}
	out := make([]string, 0, len(order))
	for _, key := range order {
		if fl := flavors[key]; len(fl) > 0 {
			key += " (" + strings.Join(fl, ", ") + ")"
		}
		out = append(out, key)
	}
	return out
}
