// Package assemble builds a kpreload initramfs: the static /init, the kernel's own
// boot-critical modules (storage, bus and filesystem drivers, with dependencies),
// module sets from the cache, the firmware they declare, and the boot index that
// ties them together.
package assemble

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/initramfs/archive"
	"github.com/kpreload/kpreload/initramfs/rootcheck"
	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/internal/none"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/modalias"
	"github.com/kpreload/kpreload/kmodcache/modinfo"
	"github.com/kpreload/kpreload/kmodcache/names"
	"github.com/kpreload/kpreload/live/coldplug"
)

// BootCritical lists, as globs over module paths relative to /lib/modules/<kver>
// (compression suffix removed), the kernel modules an initramfs needs to find a
// root disk on common clouds and QEMU: virtio (KVM clouds, QEMU), NVMe (AWS Nitro,
// GCP, Azure v6), SCSI front ends (GCP virtio-scsi, Azure storvsc, VMware pvscsi,
// Xen), AHCI/IDE, Hyper-V's and Xen's buses, QEMU's fw_cfg (instance data), and the
// usual root filesystems. Their dependencies are added from modules.dep.
var BootCritical = []string{
	"kernel/drivers/virtio/virtio_pci.ko",
	"kernel/drivers/virtio/virtio_mmio.ko",
	"kernel/drivers/block/virtio_blk.ko",
	"kernel/drivers/block/xen-blkfront.ko",
	"kernel/drivers/nvme/host/nvme.ko",
	"kernel/drivers/scsi/virtio_scsi.ko",
	"kernel/drivers/scsi/sd_mod.ko",
	"kernel/drivers/scsi/sr_mod.ko",
	"kernel/drivers/scsi/hv_storvsc.ko",
	"kernel/drivers/scsi/vmw_pvscsi.ko",
	"kernel/drivers/scsi/xen-scsifront.ko",
	"kernel/drivers/ata/ahci.ko",
	"kernel/drivers/ata/ata_piix.ko",
	"kernel/drivers/ata/ata_generic.ko",
	"kernel/drivers/hv/hv_vmbus.ko",
	"kernel/drivers/firmware/qemu_fw_cfg.ko",
}

// Filesystems are the root filesystems an initramfs can mount, each with the
// modules it needs (globs as BootCritical's): all of them unless
// Options.Filesystems names fewer. xfs and btrfs alone are half of an
// uncompressed initramfs, which the kernel decompresses before /init runs.
var Filesystems = map[string][]string{
	"ext4":    {"kernel/fs/ext4/ext4.ko"},
	"xfs":     {"kernel/fs/xfs/xfs.ko"},
	"btrfs":   {"kernel/fs/btrfs/btrfs.ko"},
	"vfat":    {"kernel/fs/fat/vfat.ko", "kernel/fs/nls/nls_cp437.ko", "kernel/fs/nls/nls_ascii.ko", "kernel/fs/nls/nls_utf8.ko"},
	"iso9660": {"kernel/fs/isofs/isofs.ko"},
}

// FilesystemNames returns the names Filesystems knows, sorted.
func FilesystemNames() []string {
	names := make([]string, 0, len(Filesystems))
	for n := range Filesystems {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Options describe one initramfs.
type Options struct {
	// Kernel is the kernel release the initramfs is for.
	Kernel string
	// ModulesDir is the kernel's module tree (default /lib/modules/<Kernel>).
	ModulesDir string
	// Init is the static /init binary to include.
	Init string
	// CacheDir, when set, is a kpreload module cache whose sets for Kernel are included.
	CacheDir string
	// CacheRoot, when set, is the tree CacheDir is a name in (a root
	// filesystem's cache): its index and every file it names are resolved
	// inside CacheRoot, so no link in the cache leads out of it.
	CacheRoot string
	// Modules adds more kernel modules by name (with their dependencies).
	Modules []string
	// ExtraFiles adds module files as they are, unchecked, in a set named "extra";
	// /init still refuses any that would not load on the running kernel.
	ExtraFiles []string
	// FirmwareDir is where declared firmware is taken from (default /lib/firmware).
	FirmwareDir string
	// Shell, when set, is a static shell (e.g. busybox) included as /bin/sh for kpreload.debug.
	Shell string
	// Compression is "zstd" (default), "gzip" or "none".
	Compression archive.Compression
	// Complete marks the index complete: the root's module cache holds no
	// driver set for Kernel that this initramfs lacks (an image builder that
	// puts the same sets in both says so), and /init may then choose and load
	// drivers before the root is mounted.
	Complete bool
	// Instance, when set, is the image's instance YAML, copied to
	// instance.InitramfsPath so an early decision sees the image's request.
	Instance string
	// Filesystems, when set, are the only root filesystems (keys of
	// Filesystems) whose modules are included; nil includes them all. An
	// image builder knows its root's filesystem.
	Filesystems []string
	// Root, when set, is the root filesystem the initramfs must mount: Build
	// fails, writing nothing, when /init could not (rootcheck.Check).
	Root *rootcheck.Root
}

// Result says what went into an initramfs.
type Result struct {
	Kernel          string   `json:"kernel"`
	Output          string   `json:"output,omitempty"`
	Size            int64    `json:"size"`
	SHA256          string   `json:"sha256"`
	Compression     string   `json:"compression"`
	Modules         []string `json:"modules"`
	Sets            []string `json:"sets"`
	Firmware        []string `json:"firmware,omitempty"`
	MissingFirmware []string `json:"missing_firmware,omitempty"`
	// SupportedGPUs are the paths, inside the initramfs, of the sets'
	// supported-gpus.json files.
	SupportedGPUs []string `json:"supported_gpus,omitempty"`
}

// Build assembles the initramfs and writes it to w.
func Build(o Options, w io.Writer) (*Result, error) {
	if o.Kernel == "" {
		return nil, fmt.Errorf("no kernel release given")
	}
	if err := names.Check("kernel release", o.Kernel); err != nil {
		return nil, err // it names the module tree, the index and paths in the archive
	}
	if o.ModulesDir == "" {
		o.ModulesDir = filepath.Join("/lib/modules", o.Kernel)
	}
	if o.FirmwareDir == "" {
		o.FirmwareDir = "/lib/firmware"
	}
	if o.Compression == "" {
		o.Compression = archive.Zstd
	}
	if o.Init == "" {
		return nil, fmt.Errorf("no /init binary given")
	}
	if _, err := os.Stat(o.ModulesDir); err != nil {
		return nil, fmt.Errorf("kernel %s: no module tree at %s (kernels there: %s)", o.Kernel, o.ModulesDir, available(filepath.Dir(o.ModulesDir)))
	}
	tree, err := modalias.LoadTree(o.ModulesDir)
	if err != nil {
		return nil, fmt.Errorf("kernel %s: %w", o.Kernel, err)
	}
	a := archive.New()
	for _, d := range []string{"dev", "proc", "sys", "run", "tmp", "newroot", "bin", "sbin", "lib/firmware"} {
		if err := a.AddDir(d, 0o755); err != nil {
			return nil, err
		}
	}
	// No dev/console node: the kernel supplies it. Debian's kernels are built
	// with an empty CONFIG_INITRAMFS_SOURCE, so they first unpack their built-in
	// usr/default_cpio_list (dev, dev/console c 5 1, root) and this archive over
	// it, and /init mounts devtmpfs on /dev and reopens /dev/console itself.
	if o.Instance != "" {
		if err := a.AddFileFrom(strings.TrimPrefix(instance.InitramfsPath, "/"), 0o644, o.Instance); err != nil {
			return nil, fmt.Errorf("instance file: %w", err)
		}
	}
	if err := a.AddFileFrom("init", 0o755, o.Init); err != nil {
		return nil, fmt.Errorf("init: %w", err)
	}
	// No sbin/modprobe: /init makes that link when it starts, so that the
	// kernel's own requests before /init find no helper (modprobe.HelperPath).
	if o.Shell != "" {
		if err := a.AddFileFrom("bin/sh", 0o755, o.Shell); err != nil {
			return nil, fmt.Errorf("shell: %w", err)
		}
	}
	res := &Result{Kernel: o.Kernel, Compression: string(o.Compression)}
	modRoot := path.Join("lib/modules", o.Kernel)
	idx := &bootindex.Index{Format: bootindex.FormatVersion, Kernel: o.Kernel, Complete: o.Complete}

	kset, err := kernelSet(tree, o)
	if err != nil {
		return nil, err
	}
	for _, m := range kset.Modules {
		if err := a.AddFileFrom(path.Join(modRoot, m.Path), 0o644, filepath.Join(o.ModulesDir, m.Path)); err != nil {
			return nil, err
		}
		res.Modules = append(res.Modules, m.Name)
	}
	idx.Sets = append(idx.Sets, *kset)

	if o.CacheDir != "" {
		sets, err := cacheSets(o.CacheRoot, o.CacheDir, o.Kernel)
		if err != nil {
			return nil, err
		}
		for _, cs := range sets {
			s := cs.set
			s.Dir = path.Join("kpreload", shortID(s.ID))
			for _, m := range s.Modules {
				src, err := cs.file(m.Path)
				if err != nil {
					return nil, fmt.Errorf("set %s: %w", shortID(s.ID), err)
				}
				if err := a.AddFileFrom(path.Join(modRoot, s.Dir, m.Path), 0o644, src); err != nil {
					return nil, err
				}
				res.Modules = append(res.Modules, m.Name)
			}
			if s.SupportedGPUs != "" {
				// The driver's supported-gpus.json goes next to the set's
				// modules, under its own name.
				src, err := cs.file(s.SupportedGPUs)
				if err != nil {
					return nil, fmt.Errorf("set %s: supported-gpus: %w", shortID(s.ID), err)
				}
				s.SupportedGPUs = manifest.SupportedGPUsFile
				if err := a.AddFileFrom(path.Join(modRoot, s.Dir, s.SupportedGPUs), 0o644, src); err != nil {
					return nil, fmt.Errorf("set %s: supported-gpus: %w", shortID(s.ID), err)
				}
				res.SupportedGPUs = append(res.SupportedGPUs, path.Join(modRoot, s.Dir, s.SupportedGPUs))
			}
			idx.Sets = append(idx.Sets, s)
		}
	}
	if len(o.ExtraFiles) > 0 {
		s, err := extraSet(o.ExtraFiles)
		if err != nil {
			return nil, err
		}
		for i, m := range s.Modules {
			if err := a.AddFileFrom(path.Join(modRoot, s.Dir, m.Path), 0o644, o.ExtraFiles[i]); err != nil {
				return nil, err
			}
			res.Modules = append(res.Modules, m.Name)
		}
		idx.Sets = append(idx.Sets, *s)
	}
	for _, s := range idx.Sets {
		res.Sets = append(res.Sets, s.ID)
		for _, m := range s.Modules {
			for _, fw := range m.Firmware {
				if a.Has(path.Join("lib/firmware", fw)) {
					continue
				}
				src := filepath.Join(o.FirmwareDir, fw)
				if _, err := os.Stat(src); err != nil {
					res.MissingFirmware = append(res.MissingFirmware, fw)
					continue
				}
				if err := a.AddFileFrom(path.Join("lib/firmware", fw), 0o644, src); err != nil {
					return nil, err
				}
				res.Firmware = append(res.Firmware, fw)
			}
		}
	}
	if o.Root != nil {
		if err := rootcheck.Check(idx, tree, *o.Root); err != nil {
			return nil, err
		}
	}
	ixData, err := json.Marshal(idx)
	if err != nil {
		return nil, err
	}
	if err := a.AddFile(path.Join(modRoot, bootindex.InitramfsName), 0o644, ixData); err != nil {
		return nil, err
	}
	h := sha256.New()
	n, err := a.Encode(io.MultiWriter(w, h), o.Compression)
	if err != nil {
		return nil, fmt.Errorf("write initramfs: %w", err)
	}
	res.Size = n
	res.SHA256 = hex.EncodeToString(h.Sum(nil))
	sort.Strings(res.Modules)
	return res, nil
}

// WriteFile builds the initramfs into path atomically (fileutil: temp file, sync,
// rename, directory sync).
func WriteFile(o Options, out string) (*Result, error) {
	tmp, err := fileutil.CreateTemp(out)
	if err != nil {
		return nil, err
	}
	defer tmp.Abort()
	res, err := Build(o, tmp)
	if err != nil {
		return nil, err
	}
	if err := tmp.Commit(0o644, true); err != nil {
		return nil, err
	}
	res.Output = out
	return res, nil
}

func shortID(id string) string {
	if len(id) > 16 {
		return id[:16]
	}
	return id
}

// stripCompression removes .xz/.zst/.gz from a module path.
func stripCompression(p string) string {
	for _, ext := range []string{".xz", ".zst", ".gz"} {
		if strings.HasSuffix(p, ext) {
			return strings.TrimSuffix(p, ext)
		}
	}
	return p
}

// kernelSet selects the boot-critical modules of the kernel's own tree and their
// dependencies, and describes them for the boot index.
func kernelSet(tree *modalias.Tree, o Options) (*bootindex.Set, error) {
	globs := slices.Clone(BootCritical)
	fss := o.Filesystems
	if fss == nil {
		fss = FilesystemNames()
	}
	for _, fs := range fss {
		g, ok := Filesystems[fs]
		if !ok {
			return nil, fmt.Errorf("filesystem %q: kpreload knows %s", fs, strings.Join(FilesystemNames(), ", "))
		}
		globs = append(globs, g...)
	}
	var names []string
	for _, n := range tree.Names() {
		m, _ := tree.Module(n)
		if m.Builtin || m.Path == "" {
			continue
		}
		p := stripCompression(m.Path)
		for _, g := range globs {
			if ok, _ := path.Match(g, p); ok {
				names = append(names, n)
				break
			}
		}
	}
	names = append(names, o.Modules...)
	order, err := tree.LoadOrder(names...)
	if err != nil {
		return nil, fmt.Errorf("kernel %s: %w", o.Kernel, err)
	}
	set := &bootindex.Set{ID: bootindex.KernelSetID, Dir: "."}
	var mods []bootindex.Module
	for _, m := range order {
		if m.Builtin {
			continue
		}
		mods = append(mods, bootindex.Module{Name: m.Name, Path: m.Path})
	}
	if err := describeAll(mods, o.ModulesDir); err != nil {
		return nil, err
	}
	// modprobe follows only the first softdep line of a module (btrfs has
	// four, one per checksum); /init follows each module's own soft
	// dependencies, all of them: add what they name and the set lacks,
	// unless the kernel builds it in, until nothing is missing.
	for {
		var more []bootindex.Module
		for _, m := range tree.LoadOrderFor(unresolvedSoftPre(mods, tree)...) {
			if !m.Builtin && !slices.ContainsFunc(mods, func(x bootindex.Module) bool { return x.Name == m.Name }) &&
				!slices.ContainsFunc(more, func(x bootindex.Module) bool { return x.Name == m.Name }) {
				more = append(more, bootindex.Module{Name: m.Name, Path: m.Path})
			}
		}
		if len(more) == 0 {
			break
		}
		if err := describeAll(more, o.ModulesDir); err != nil {
			return nil, err
		}
		mods = append(mods, more...)
	}
	set.Modules = mods
	return set, nil
}

// unresolvedSoftPre returns the soft dependencies of mods that no module of
// mods answers as /init resolves them (live/coldplug's index: by name, else
// by alias) and that the kernel does not build in.
func unresolvedSoftPre(mods []bootindex.Module, tree *modalias.Tree) []string {
	ix := coldplug.NewIndex()
	ix.Add("/", &bootindex.Index{Sets: []bootindex.Set{{Dir: ".", Modules: mods}}}, nil)
	var out []string
	for _, m := range mods {
		for _, d := range m.SoftPre {
			if slices.Contains(out, d) || len(ix.ByName(d)) > 0 || len(ix.Match(d)) > 0 || tree.BuiltinProvides(d) {
				continue
			}
			out = append(out, d)
		}
	}
	return out
}

// describeAll fills the boot index entries of mods, files under modulesDir,
// from the module files (aliases, vermagic, firmware), a few in parallel.
func describeAll(mods []bootindex.Module, modulesDir string) error {
	errs := make([]error, len(mods))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range mods {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = describe(&mods[i], filepath.Join(modulesDir, mods[i].Path))
		}(i)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// describe fills a boot index entry from the module file itself.
func describe(m *bootindex.Module, file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("module %s: %w", m.Name, err)
	}
	sum := sha256.Sum256(data)
	elf, comp, err := modinfo.Decompress(file, data)
	if err != nil {
		return err
	}
	info, err := modinfo.Parse(file, elf)
	if err != nil {
		return err
	}
	if m.Name == "" {
		m.Name = info.Name
	}
	m.SHA256 = hex.EncodeToString(sum[:])
	m.Compression = comp
	m.Vermagic = info.Vermagic
	m.Unsigned = !info.Signed
	m.Aliases = info.Aliases
	m.Depends = info.Depends
	m.Firmware = info.Firmware
	sd := &manifest.Module{Softdeps: info.Softdeps}
	m.SoftPre, m.SoftPost = sd.SoftPre(), sd.SoftPost()
	return nil
}

// extraSet describes module files added as they are.
func extraSet(files []string) (*bootindex.Set, error) {
	s := &bootindex.Set{ID: "extra", Dir: "kpreload/extra"}
	seen := map[string]bool{}
	for i, f := range files {
		m := bootindex.Module{}
		if err := describe(&m, f); err != nil {
			return nil, err
		}
		// Two files may carry the same module name (e.g. builds for two kernels).
		m.Path = fmt.Sprintf("%02d-%s", i, filepath.Base(f))
		if seen[m.Path] {
			return nil, fmt.Errorf("module file %s given twice", f)
		}
		seen[m.Path] = true
		s.Modules = append(s.Modules, m)
	}
	return s, nil
}

type cacheSet struct {
	set bootindex.Set
	// file returns the path on this machine of a file of the set, named
	// relative to the set's directory.
	file func(rel string) (string, error)
}

// cacheSets reads the cache's boot index for the kernel; with root, the
// cache is the name cacheDir in the tree at root, and the index and every
// file it names are resolved inside root.
func cacheSets(root, cacheDir, kernel string) ([]cacheSet, error) {
	var out []cacheSet
	if root != "" {
		name := path.Join(cacheDir, bootindex.IndexDir, kernel+".json")
		ix, err := bootindex.ReadIn(root, name)
		if err != nil {
			return nil, fmt.Errorf("cache %s has no modules for kernel %s: %w", inroot.Host(root, cacheDir), kernel, err)
		}
		for _, s := range ix.Sets {
			dir := path.Join(path.Dir(name), s.Dir)
			out = append(out, cacheSet{set: s, file: func(rel string) (string, error) {
				return inroot.Resolve(root, path.Join(dir, rel))
			}})
		}
		return out, nil
	}
	p := bootindex.Path(cacheDir, kernel)
	ix, err := bootindex.Read(p)
	if err != nil {
		return nil, fmt.Errorf("cache %s has no modules for kernel %s: %w", cacheDir, kernel, err)
	}
	for _, s := range ix.Sets {
		dir := filepath.Join(filepath.Dir(p), s.Dir)
		out = append(out, cacheSet{set: s, file: func(rel string) (string, error) {
			return filepath.Join(dir, filepath.FromSlash(rel)), nil
		}})
	}
	return out, nil
}

// available lists the kernel releases that have a module tree under dir.
func available(dir string) string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "none: " + err.Error()
	}
	var names []string
	for _, e := range ents {
		if _, err := os.Stat(filepath.Join(dir, e.Name(), "modules.dep")); err == nil {
			names = append(names, e.Name())
		}
	}
	return none.List(names)
}
