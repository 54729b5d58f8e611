package install

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

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
	// Drivers are the driver sets the root's module cache holds for the kernel,
	// as "driver version".
	Drivers []string `json:"drivers,omitempty"`
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
	boot, err := os.ReadDir(filepath.Join(root, "boot"))
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("list kernels: %w", err)
	}
	for _, e := range boot {
		if r, ok := strings.CutPrefix(e.Name(), "vmlinuz-"); ok {
			add(r)
		}
	}
	mods, err := os.ReadDir(filepath.Join(root, "lib", "modules"))
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("list kernels: %w", err)
	}
	for _, e := range mods {
		if e.IsDir() || e.Type()&os.ModeSymlink != 0 {
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

// kernelState reads what root holds for one kernel.
func kernelState(root, release string) Kernel {
	exists := func(p string) bool { _, err := os.Stat(filepath.Join(root, p)); return err == nil }
	k := Kernel{
		Release:       release,
		Image:         exists(KernelImagePath(release)),
		Modules:       exists(filepath.Join("lib/modules", release, "modules.dep")),
		Initramfs:     exists(InitramfsPath(release)),
		DistInitramfs: exists("boot/initrd.img-" + release),
	}
	if ix, err := bootindex.Read(bootindex.Path(filepath.Join(root, CacheDir), release)); err == nil {
		for _, s := range ix.Sets {
			if s.ID == bootindex.KernelSetID {
				continue
			}
			k.Drivers = append(k.Drivers, s.Driver+" "+s.Version)
		}
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
