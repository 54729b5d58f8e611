package rootcheck

import (
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/bootindex"
)

// fakeKernel is a kernel's module tree reduced to what Check asks: the
// lookups built-in code answers, and the modules each lookup finds.
type fakeKernel struct {
	builtin []string
	modules map[string][]string
}

func (k fakeKernel) BuiltinProvides(l string) bool { return slices.Contains(k.builtin, l) }
func (k fakeKernel) Resolve(l string) []string     { return k.modules[l] }

// generic is bookworm's generic kernel as far as an ext4 root goes: ext4,
// jbd2 and crc32c are modules; ext4 and jbd2 ask for crypto-crc32c.
var generic = fakeKernel{
	builtin: []string{"sha256", "crypto-sha256"},
	modules: map[string][]string{
		"fs-ext4": {"ext4"}, "ext4": {"ext4"}, "jbd2": {"jbd2"}, "mbcache": {"mbcache"}, "crc16": {"crc16"},
		"crypto-crc32c": {"crc32c_intel", "crc32c_generic"}, "crc32c": {"crc32c_intel", "crc32c_generic"},
		"fs-xfs": {"xfs"}, "fs-vfat": {"vfat"}, "nls_cp437": {"nls_cp437"}, "nls_ascii": {"nls_ascii"},
		"crypto-xxhash64": {"xxhash_generic"},
	},
}

// cloud builds ext4 and crc32c in.
var cloud = fakeKernel{builtin: []string{"fs-ext4", "ext4", "jbd2", "crypto-crc32c", "crc32c"}, modules: map[string][]string{"fs-xfs": {"xfs"}}}

func mod(name string, aliases, depends, softpre []string) bootindex.Module {
	return bootindex.Module{Name: name, Path: name + ".ko", Aliases: aliases, Depends: depends, SoftPre: softpre}
}

var (
	ext4    = mod("ext4", []string{"fs-ext4", "ext3", "fs-ext3"}, []string{"jbd2", "mbcache", "crc16"}, []string{"crypto-crc32c"})
	jbd2    = mod("jbd2", nil, nil, []string{"crypto-crc32c"})
	mbcache = mod("mbcache", nil, nil, nil)
	crc16   = mod("crc16", nil, nil, nil)
	crc32c  = mod("crc32c_generic", []string{"crypto-crc32c", "crc32c", "crypto-crc32c-generic"}, nil, nil)
	vfat    = mod("vfat", []string{"fs-vfat"}, nil, nil)
)

func index(mods ...bootindex.Module) *bootindex.Index {
	return &bootindex.Index{Format: bootindex.FormatVersion, Kernel: "6.1.0-56-amd64", Sets: []bootindex.Set{{ID: bootindex.KernelSetID, Dir: ".", Modules: mods}}}
}

func TestCheck(t *testing.T) {
	csum := Root{FSType: "ext4", Features: []string{"metadata_csum"}, Device: "/dev/vda1"}
	plain := Root{FSType: "ext4", Device: "/dev/vda1"}
	for _, c := range []struct {
		name string
		ix   *bootindex.Index
		k    Kernel
		root Root
		want []string // substrings of the error; none: it mounts
	}{
		{"generic kernel, everything there", index(crc32c, jbd2, mbcache, crc16, ext4), generic, csum, nil},
		{"built for vfat only", index(vfat), generic, csum, []string{"cannot mount the root, ext4 (metadata_csum) on /dev/vda1", "ext4 (fs-ext4) (ext4's module)", "crc32c_intel or crc32c_generic (crypto-crc32c) (ext4's metadata_csum)", "needs ext4 among its --filesystems"}},
		{"crc32c left out: the soft dependency and the feature", index(jbd2, mbcache, crc16, ext4), generic, csum, []string{"crc32c_intel or crc32c_generic (crypto-crc32c) (a soft dependency of jbd2, a soft dependency of ext4, ext4's metadata_csum)"}},
		{"crc32c left out, no metadata_csum: ext4's soft dependency still asks", index(jbd2, mbcache, crc16, ext4), generic, plain, []string{"lacks crc32c_intel or crc32c_generic (crypto-crc32c) (a soft dependency of jbd2, a soft dependency of ext4)"}},
		{"a dependency left out", index(crc32c, jbd2, crc16, ext4), generic, csum, []string{"lacks mbcache (a dependency of ext4)"}},
		{"cloud kernel: ext4 and crc32c built in", index(vfat), cloud, csum, nil},
		{"cloud kernel: xfs is a module", index(vfat), cloud, Root{FSType: "xfs", Features: []string{"v5"}}, []string{"lacks xfs (fs-xfs) (xfs's module)"}},
		{"a kernel without the filesystem at all", index(), fakeKernel{}, plain, []string{"lacks fs-ext4, which the kernel has no module for (ext4's module)"}},
		{"btrfs with xxhash64 checksums", index(), fakeKernel{builtin: []string{"fs-btrfs"}, modules: generic.modules}, Root{FSType: "btrfs", Features: []string{"csum=xxhash64"}}, []string{"lacks xxhash_generic (crypto-xxhash64) (btrfs's csum=xxhash64)"}},
		{"btrfs with sha256 checksums (built in)", index(), fakeKernel{builtin: []string{"fs-btrfs", "crypto-sha256"}}, Root{FSType: "btrfs", Features: []string{"csum=sha256"}}, nil},
		{"vfat needs its code pages", index(vfat), generic, Root{FSType: "vfat"}, []string{"lacks nls_cp437 (vfat's code page); nls_ascii (vfat's character set)"}},
		{"LVM", index(crc32c, jbd2, mbcache, crc16, ext4), generic, Root{FSType: "ext4", Device: "/dev/mapper/vg-root", Stack: "device-mapper (LVM, LUKS)"}, []string{"does not assemble device-mapper (LVM, LUKS)"}},
		{"a filesystem /init does not mount", index(), generic, Root{FSType: "f2fs", Device: "/dev/vda1"}, []string{"f2fs on /dev/vda1", "mounts btrfs, ext4, iso9660, vfat, xfs"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Check(c.ix, c.k, c.root)
			if len(c.want) == 0 {
				if err != nil {
					t.Errorf("Check = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check = nil, want an error saying %q", c.want)
			}
			for _, w := range c.want {
				if got := err.Error(); !strings.Contains(got, w) {
					t.Errorf("Check =\n  %s\nwant it to say %q", got, w)
				}
			}
		})
	}
}

func TestRequests(t *testing.T) {
	for _, c := range []struct {
		root Root
		want []string
	}{
		{Root{FSType: "ext4"}, []string{"fs-ext4"}},
		{Root{FSType: "ext4", Features: []string{"metadata_csum", "ea_inode"}}, []string{"fs-ext4", "crypto-crc32c"}},
		{Root{FSType: "xfs", Features: []string{"v5"}}, []string{"fs-xfs", "crypto-crc32c"}},
		{Root{FSType: "btrfs", Features: []string{"csum=blake2b"}}, []string{"fs-btrfs", "crypto-blake2b-256"}},
		{Root{FSType: "vfat"}, []string{"fs-vfat", "nls_cp437", "nls_ascii"}},
		{Root{FSType: "iso9660"}, []string{"fs-iso9660"}},
	} {
		var got []string
		for _, q := range Requests(c.root) {
			got = append(got, q.Lookup)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("Requests(%v) = %q, want %q", c.root, got, c.want)
		}
	}
}

func TestDefault(t *testing.T) {
	for _, c := range []struct {
		fstype string
		want   []string
	}{
		{"ext4", []string{"metadata_csum"}},
		{"xfs", []string{"v5"}},
		{"btrfs", []string{"csum=crc32c"}},
		{"vfat", nil},
	} {
		got, err := Default(c.fstype)
		if err != nil || got.FSType != c.fstype || !slices.Equal(got.Features, c.want) {
			t.Errorf("Default(%s) = %+v, %v; want features %q", c.fstype, got, err, c.want)
		}
	}
	if _, err := Default("zfs"); err == nil || !strings.Contains(err.Error(), "btrfs, ext4, iso9660, vfat, xfs") {
		t.Errorf("Default(zfs) error = %v, want one listing what /init mounts", err)
	}
}
