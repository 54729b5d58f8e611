// Package rootcheck decides, before a boot loader is pointed at a kpreload
// initramfs (kpreload install, the image builder), whether its /init can
// mount the root: the filesystem's module, what the superblock's features
// make the kernel ask for at mount time (crc32c for ext4's metadata_csum,
// xfs v5 and btrfs), and their dependencies and soft dependencies, each
// found in the initramfs's boot index the way /init finds it (by name, else
// by alias) or built into the kernel. Detect reads the root a directory is
// on; Check is the decision.
package rootcheck

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/kpreload/kpreload/initramfs/rootfs"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/modname"
	"github.com/kpreload/kpreload/live/coldplug"
)

// Root is the filesystem /init is to mount as the root.
type Root struct {
	// FSType is the filesystem as /init identifies it from the superblock
	// (rootfs.FSType): ext4 (ext2 and ext3 too), xfs, btrfs, vfat, iso9660.
	FSType string
	// Features are the superblock's features that need more modules
	// (rootfs.Features: "metadata_csum", "v5", "csum=crc32c", ...).
	Features []string
	// Device says where the filesystem is, for messages ("/dev/vda1").
	Device string
	// Stack, when set, names a block layer between the disk and the
	// filesystem that /init does not assemble ("device-mapper (LVM, LUKS)").
	Stack string
}

// String describes the root for messages: "ext4 (metadata_csum) on /dev/vda1".
func (r Root) String() string {
	s := r.FSType
	if len(r.Features) > 0 {
		s += " (" + strings.Join(r.Features, ", ") + ")"
	}
	if r.Device != "" {
		s += " on " + r.Device
	}
	if r.Stack != "" {
		s += " through " + r.Stack
	}
	return s
}

// Filesystems are the root filesystems /init identifies and mounts.
var Filesystems = []string{"btrfs", "ext4", "iso9660", "vfat", "xfs"}

// Default returns fstype as its mkfs makes it by default, for a root whose
// filesystem does not exist yet: ext4 with metadata_csum, xfs v5, btrfs
// with crc32c checksums.
func Default(fstype string) (Root, error) {
	if !slices.Contains(Filesystems, fstype) {
		return Root{}, fmt.Errorf("root filesystem %q: kpreload's /init mounts %s", fstype, strings.Join(Filesystems, ", "))
	}
	r := Root{FSType: fstype, Device: "a new " + fstype + " filesystem (mkfs's defaults)"}
	switch fstype {
	case "ext4":
		r.Features = []string{rootfs.FeatureMetadataCsum}
	case "xfs":
		r.Features = []string{rootfs.FeatureXFSv5}
	case "btrfs":
		r.Features = []string{rootfs.FeatureBtrfsCsum + "crc32c"}
	}
	return r, nil
}

// Request is one module request the mount of a root makes.
type Request struct {
	// Lookup is what is asked for: a module name or an alias ("fs-ext4").
	Lookup string
	// Why says what asks for it, for messages.
	Why string
}

// featureRequests maps a filesystem's features to what the kernel asks for
// when it mounts it: crypto_alloc_shash("crc32c") asks for crypto-crc32c.
var featureRequests = map[string]map[string]string{
	"ext4": {
		rootfs.FeatureMetadataCsum: "crypto-crc32c",
		rootfs.FeatureEAInode:      "crypto-crc32c",
	},
	"xfs": {rootfs.FeatureXFSv5: "crypto-crc32c"},
	"btrfs": {
		rootfs.FeatureBtrfsCsum + "crc32c":   "crypto-crc32c",
		rootfs.FeatureBtrfsCsum + "xxhash64": "crypto-xxhash64",
		rootfs.FeatureBtrfsCsum + "sha256":   "crypto-sha256",
		rootfs.FeatureBtrfsCsum + "blake2b":  "crypto-blake2b-256",
	},
}

// Requests returns the module requests mounting r makes, in order: the
// filesystem's module (/init loads it by its fs-<type> alias), what its
// features need, and vfat's code page and character set (Debian's
// defaults: cp437, ascii).
func Requests(r Root) []Request {
	out := []Request{{Lookup: "fs-" + r.FSType, Why: r.FSType + "'s module"}}
	for _, f := range r.Features {
		if l, ok := featureRequests[r.FSType][f]; ok && !slices.ContainsFunc(out, func(q Request) bool { return q.Lookup == l }) {
			out = append(out, Request{Lookup: l, Why: r.FSType + "'s " + f})
		}
	}
	if r.FSType == "vfat" {
		out = append(out, Request{Lookup: "nls_cp437", Why: "vfat's code page"}, Request{Lookup: "nls_ascii", Why: "vfat's character set"})
	}
	return out
}

// Kernel is what Check needs to know of the kernel the initramfs is for
// (kmodcache/modalias.Tree answers it).
type Kernel interface {
	// BuiltinProvides reports whether built-in code answers a name or alias.
	BuiltinProvides(lookup string) bool
	// Resolve returns the modules a name or alias finds in the kernel's
	// module tree (modprobe -R); none when the kernel has no such module.
	Resolve(lookup string) []string
}

// Check returns nil when /init, with the modules of the boot index ix and
// the kernel's built-in code, can mount r: every request of Requests(r)
// resolves, and so do the dependencies and soft dependencies of every
// module it brings in (a soft dependency the kernel has nowhere is skipped,
// as modprobe skips it). Otherwise its *Error names the root, each missing
// module with what needs it, and the fix.
func Check(ix *bootindex.Index, k Kernel, r Root) error {
	if r.Stack != "" {
		return &Error{Root: r, msg: fmt.Sprintf("the root is %s: kpreload's /init does not assemble %s, it mounts a filesystem on a disk or partition", r, r.Stack)}
	}
	if !slices.Contains(Filesystems, r.FSType) {
		return &Error{Root: r, msg: fmt.Sprintf("the root is %s: kpreload's /init mounts %s", r, strings.Join(Filesystems, ", "))}
	}
	c := checker{ix: coldplug.NewIndex(), k: k, seen: map[string]bool{}, why: map[string][]string{}}
	c.ix.Add("/", ix, nil)
	reqs := Requests(r)
	for _, q := range reqs {
		c.request(q.Lookup, q.Why, true)
	}
	if len(c.missing) == 0 {
		return nil
	}
	var parts []string
	for _, m := range c.missing {
		parts = append(parts, m+" ("+strings.Join(c.why[m], ", ")+")")
	}
	msg := fmt.Sprintf("the kpreload initramfs of kernel %s cannot mount the root, %s: it lacks %s", ix.Kernel, r, strings.Join(parts, "; "))
	if c.why[c.missing[0]][0] == reqs[0].Why {
		msg += fmt.Sprintf(" (an initramfs for this root needs %s among its --filesystems)", r.FSType)
	}
	return &Error{Root: r, Missing: c.missing, msg: msg}
}

// Error is Check's answer when the initramfs cannot mount the root.
type Error struct {
	// Root is the root it cannot mount.
	Root Root
	// Missing are the modules (or lookups) it lacks, in the order found.
	Missing []string
	msg     string
}

func (e *Error) Error() string { return e.msg }

// checker walks what a mount loads through one boot index.
type checker struct {
	ix      *coldplug.Index
	k       Kernel
	seen    map[string]bool
	missing []string            // what is missing, in the order found
	why     map[string][]string // what needs each
}

// request resolves lookup as /init does (by name, else by alias) and walks
// the modules found. A lookup nothing answers is missing when the kernel has
// a module for it (or always, for what the mount itself asks for).
func (c *checker) request(lookup, why string, required bool) {
	if c.k.BuiltinProvides(lookup) {
		return
	}
	var names []string
	for _, cand := range c.ix.ByName(lookup) {
		names = append(names, cand.Module.Name)
	}
	if len(names) == 0 {
		names = c.ix.Match(lookup)
	}
	if len(names) == 0 {
		mods := c.k.Resolve(lookup)
		switch {
		case len(mods) == 1 && mods[0] == modname.Normalize(lookup):
			c.miss(mods[0], why)
		case len(mods) > 0:
			c.miss(strings.Join(mods, " or ")+" ("+lookup+")", why)
		case required:
			c.miss(lookup+", which the kernel has no module for", why)
		}
		return
	}
	for _, n := range names {
		c.module(n)
	}
}

// module walks one module of the index: its dependencies, each of which
// must be in the index or built in, and its soft dependencies.
func (c *checker) module(name string) {
	name = modname.Normalize(name)
	if c.seen[name] {
		return
	}
	c.seen[name] = true
	cands := c.ix.ByName(name)
	if len(cands) == 0 {
		return
	}
	m := cands[0].Module
	for _, d := range m.Depends {
		switch {
		case len(c.ix.ByName(d)) > 0:
			c.module(d)
		case !c.k.BuiltinProvides(d):
			c.miss(modname.Normalize(d), "a dependency of "+name)
		}
	}
	for _, d := range m.SoftPre {
		c.request(d, "a soft dependency of "+name, false)
	}
}

// miss records what is missing and why it is needed.
func (c *checker) miss(what, why string) {
	if _, ok := c.why[what]; !ok {
		c.missing = append(c.missing, what)
	}
	if !slices.Contains(c.why[what], why) {
		c.why[what] = append(c.why[what], why)
	}
}

// ErrUnknown is wrapped by Detect's errors when the root's filesystem
// cannot be told (not on a block device /init could mount).
var ErrUnknown = errors.New("the root's filesystem cannot be told")
