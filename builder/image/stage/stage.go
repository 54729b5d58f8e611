// Package stage puts everything kpreload-specific into a directory tree (Stage):
// the module cache subset of the image's kernels (cells from the cache, a
// registry or dkms through builder/matrix), each driver version's userspace,
// firmware, the kpreload binaries, the kernel install hooks and one kpreload
// initramfs per kernel. It works on any directory: the root filesystem
// builder/image is assembling, or a staging directory the Packer provisioner
// uploads to another builder's machine.
package stage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/builder/image/rootfiles"
	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/initramfs/rootcheck"
	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/internal/progress"
	"github.com/kpreload/kpreload/kmodcache/remote"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// DriversDir holds each driver version's userspace inside the root, unpacked
// with dpkg -x, as <version>/ (side by side, so /init can choose the version
// at boot).
const DriversDir = "opt/kpreload/drivers"

// Options describes what Stage puts into a root tree.
type Options struct {
	// Kernels are the kernel releases the image boots; the cache subset and the
	// initramfs images are made for them.
	Kernels []string
	// Recipes are the drivers the image carries.
	Recipes []*recipe.Recipe
	// CacheDir is the module cache the cells are read from (default store.DefaultDir).
	CacheDir string
	// BuildMissing builds missing cells with dkms (builder/matrix) instead of
	// failing with ErrMissingCells.
	BuildMissing bool
	// Remote, if set, is a registry of cells (kmodcache/remote): cells the
	// module cache lacks are pulled from it by their content keys (every blob
	// verified); with BuildMissing, cells it lacks too are built and pushed
	// to it.
	Remote *remote.Remote
	// EarlyDrivers puts the driver sets into each initramfs with a complete
	// index and copies the instance file in, so /init chooses and loads the
	// drivers while it finds the root; the root is marked
	// (install.EarlyDrivers) so that the kernel hook builds them that way
	// too. Initramfs images grow by the sets.
	EarlyDrivers bool
	// DownloadDir holds downloaded .debs (debs/) and unpacked kernels
	// (kernels/<release>/) (default archive.DefaultCache()).
	DownloadDir string
	// ModulesDir returns the module tree (lib/modules/<release>) of a kernel,
	// used to build its initramfs; nil means <root>/lib/modules/<release> when
	// the root holds it (an image being built), else the kernel unpacked under
	// DownloadDir/kernels/<release> (scripts/kernels.sh).
	ModulesDir func(release string) string
	// Lister checks the kernels when BuildMissing is set (nil: recipe.AptKernelsIn(DownloadDir)).
	Lister recipe.KernelLister
	// KpreloadBinary is the static kpreload CLI, put at install.Kpreload. Required.
	KpreloadBinary string
	// InitBinary is the static /init, put at install.Init and into each initramfs. Required.
	InitBinary string
	// Instance, if set, is an instance YAML file put at install.Instance.
	Instance string
	// RemoteConfig, if set, is a registry configuration file (see
	// install.RemoteConfig) put at /etc/kpreload/remote.yaml with the trusted
	// keys and credentials it names: the kernel hook pulls new kernels'
	// cells from there.
	RemoteConfig string
	// Cmdline, if set, is written to install.Cmdline: the kernel command line the
	// install hook gives new loader entries (builder/image's Build writes
	// "root=UUID=<root> rw" and its Options.Boot.Cmdline). When the image has none, the hook uses the running
	// system's /proc/cmdline.
	Cmdline string
	// NoInitramfs leaves out the initramfs images (a provisioner that runs the
	// install hook on the target instead).
	NoInitramfs bool
	// Progress, if set, is told about each long step.
	Progress func(msg string)
	// Tools run dpkg and make (a nil one: Host's).
	Tools Tools
}

// Resolve returns o with its zero fields filled in: the host's tools, the
// default module cache and downloads directory, the archive's kernel lister.
// Stage and EnsureCells resolve o themselves; builder/image resolves its
// Options.Stage with the rest of its options, once.
func (o Options) Resolve() Options {
	o.Tools = o.Tools.orDefault()
	if o.CacheDir == "" {
		o.CacheDir = store.DefaultDir
	}
	if o.DownloadDir == "" {
		o.DownloadDir = archive.DefaultCache()
	}
	if o.Lister == nil {
		o.Lister = recipe.AptKernelsIn(o.DownloadDir)
	}
	return o
}

// Problems returns what is wrong with o's recipes and files, one error each,
// without reading the cache or the network: a nil recipe or one given twice,
// a missing kpreload or /init binary, a missing instance or registry
// configuration file.
func (o Options) Problems() []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	names := map[string]bool{}
	for _, r := range o.Recipes {
		if r == nil {
			bad("nil recipe")
			continue
		}
		if names[r.Name] {
			bad("recipe %s given twice", r.Name)
		}
		names[r.Name] = true
	}
	for _, p := range []struct{ what, path string }{
		{"kpreload binary (static: `make build` makes bin/kpreload)", o.KpreloadBinary},
		{"/init binary (bin/kpreload-init from `make build`)", o.InitBinary},
	} {
		if p.path == "" {
			bad("no %s given", p.what)
		} else if st, err := os.Stat(p.path); err != nil {
			bad("%s: %w", p.what, err)
		} else if st.IsDir() {
			bad("%s: %s is a directory", p.what, p.path)
		}
	}
	if o.Instance != "" {
		if _, err := os.Stat(o.Instance); err != nil {
			bad("instance file: %w", err)
		}
	}
	if o.RemoteConfig != "" {
		if _, err := os.Stat(o.RemoteConfig); err != nil {
			bad("remote configuration: %w", err)
		}
	}
	return errs
}

// say tells o.Progress, if set.
func (o Options) say(format string, a ...any) { progress.Say(o.Progress, format, a...) }

// Result says what Stage put into the root.
type Result struct {
	// Drivers are the cache sets copied into install.CacheDir.
	Drivers []Driver
	// Userspace lists, per driver version, the packages unpacked under DriversDir.
	Userspace map[string][]string
	// Firmware lists the firmware packages unpacked into the root.
	Firmware []string
	// Initramfs are the kpreload initramfs images written under install.InitramfsDir.
	Initramfs []Initramfs
}

// Driver is one module cache set a root carries.
type Driver struct {
	// Recipe is the recipe's name.
	Recipe string `json:"recipe"`
	// Driver, Version and Flavor name the driver ("nvidia", "535.261.03", "open").
	Driver  string `json:"driver"`
	Version string `json:"version"`
	Flavor  string `json:"flavor,omitempty"`
	// Kernel is the kernel release the set was built for.
	Kernel string `json:"kernel"`
	// SetID is the cache set's id (the SHA-256 of its manifest).
	SetID string `json:"set_id"`
	// CacheKey is the build cache key the set was made from, when recorded.
	CacheKey map[string]string `json:"cache_key,omitempty"`
	// Modules are the module names of the set.
	Modules []string `json:"modules"`
}

// Initramfs is the kpreload initramfs of one kernel.
type Initramfs struct {
	Kernel  string `json:"kernel"`
	Path    string `json:"path"` // inside the root
	Size    int64  `json:"size"`
	SHA256  string `json:"sha256"`
	Modules int    `json:"modules"`
}

// Stage puts everything kpreload-specific into the directory tree root: the
// module cache subset for the kernels (install.CacheDir), each driver version's
// userspace (the recipes' userspace packages, apt-get download + dpkg -x, under
// DriversDir/<version>/), the recipes' firmware packages (dpkg -x into the
// root), rootfiles.FS, the kpreload binaries, the instance YAML, the kernel
// install hooks and one kpreload initramfs per kernel (install.InitramfsDir). It
// works on any directory: a root filesystem being built or a staging directory
// that is uploaded to another machine later. Packages come from the recipes'
// suites (builder/archive's private apt configurations under DownloadDir) and
// are kept in DownloadDir/debs.
func Stage(ctx context.Context, o Options, root string) (*Result, error) {
	o = o.Resolve()
	if len(o.Kernels) == 0 {
		return nil, errors.New("stage: no kernels")
	}
	for _, p := range []struct{ what, path string }{{"kpreload binary", o.KpreloadBinary}, {"/init binary", o.InitBinary}} {
		if p.path == "" {
			return nil, fmt.Errorf("stage: no %s given", p.what)
		}
		if _, err := os.Stat(p.path); err != nil {
			return nil, fmt.Errorf("stage: %s: %w", p.what, err)
		}
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("stage: %w", err)
	}
	if o.BuildMissing {
		// Building needs the kernels in the recipes' matrices. Whether the
		// archive offers them is the build's own check (builder/matrix,
		// through the same lister), made once: its error also names the
		// kernels unpacked here.
		all := func(string) bool { return true }
		if err := inMatrices(o.Kernels, o.Recipes, o.Lister, all); err != nil {
			return nil, fmt.Errorf("stage: %w", err)
		}
	}
	cells, err := resolveCells(ctx, o.CacheDir, o.DownloadDir, o.Recipes, o.Kernels, o.BuildMissing, o.Remote, o.Lister, o.Progress)
	if err != nil {
		return nil, fmt.Errorf("stage: %w", err)
	}
	res := &Result{Userspace: map[string][]string{}}

	o.say("stage: module cache subset (%d set(s)) into /%s", len(cells), install.CacheDir)
	// The root's cache: every file of it written resolved inside the root.
	to, err := store.OpenIn(root, install.CacheDir)
	if err != nil {
		return nil, fmt.Errorf("stage: %w", err)
	}
	if res.Drivers, err = copyCells(ctx, o.CacheDir, to, cells); err != nil {
		return nil, fmt.Errorf("stage: %w", err)
	}
	if err := stagePackages(ctx, o, root, res); err != nil {
		return nil, fmt.Errorf("stage: %w", err)
	}
	if err := copyRootfiles(root); err != nil {
		return nil, fmt.Errorf("stage: %w", err)
	}
	files := []struct {
		src, dst string
		mode     os.FileMode
	}{
		{o.KpreloadBinary, install.Kpreload, 0o755},
		{o.InitBinary, install.Init, 0o755},
	}
	if o.Instance != "" {
		files = append(files, struct {
			src, dst string
			mode     os.FileMode
		}{o.Instance, install.Instance, 0o644})
	}
	for _, f := range files {
		if err := copyIn(f.src, root, f.dst, f.mode); err != nil {
			return nil, fmt.Errorf("stage: %w", err)
		}
	}
	if o.Cmdline != "" {
		if err := writeIn(root, install.Cmdline, []byte(strings.TrimSpace(o.Cmdline)+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("stage: %w", err)
		}
	}
	if o.RemoteConfig != "" {
		if err := install.StageRemoteConfig(o.RemoteConfig, root); err != nil {
			return nil, fmt.Errorf("stage: %w", err)
		}
	}
	// The kernel hooks; the boot loader's part comes when the root is
	// installed (install.Install, on the build host or on the target).
	if err := install.WriteHooks(root, ""); err != nil {
		return nil, fmt.Errorf("stage: %w", err)
	}
	if o.EarlyDrivers {
		marker := "# kpreload: this image's initramfs images carry its driver sets with a complete index\n# (kpreload image build --early-drivers): /init decides and loads drivers while it finds\n# the root. The kernel install hook builds new ones the same way; remove this file to stop.\n"
		if err := writeIn(root, install.EarlyDrivers, []byte(marker), 0o644); err != nil {
			return nil, fmt.Errorf("stage: %w", err)
		}
	}
	if o.NoInitramfs {
		return res, nil
	}
	iopts := install.Options{
		Root: root,
		ModulesDir: func(k string) string {
			if o.ModulesDir != nil {
				if m := o.ModulesDir(k); m != "" {
					return m
				}
			}
			// The root's own module tree, resolved inside it, else the
			// kernel unpacked on this machine.
			if _, err := inroot.Stat(root, path.Join("lib/modules", k, "modules.dep")); err == nil {
				if mods, err := inroot.Resolve(root, path.Join("lib/modules", k)); err == nil {
					return mods
				}
			}
			return filepath.Join(o.DownloadDir, "kernels", k, "lib", "modules", k)
		},
		// The image's root is ext4 (builder/image/disk); vfat and iso9660 are the
		// filesystems of cloud-init seeds, whose user-data /init reads.
		Filesystems: []string{"ext4", "vfat", "iso9660"},
		// Each initramfs must mount that root, or the build stops here,
		// before any boot loader is set up.
		RootFS: &imageRoot,
	}
	for _, k := range o.Kernels {
		if o.EarlyDrivers {
			o.say("stage: kpreload initramfs for %s, with the driver sets and a complete index (early decision)", k)
		} else {
			o.say("stage: kpreload initramfs for %s", k)
		}
		r, err := install.BuildInitramfs(iopts, k)
		if rc := (*rootcheck.Error)(nil); errors.As(err, &rc) {
			return nil, fmt.Errorf("stage: %w", err)
		}
		if err != nil {
			return nil, fmt.Errorf("stage: %w (install linux-image-%s into the root or run scripts/kernels.sh %s)", err, k, k)
		}
		res.Initramfs = append(res.Initramfs, Initramfs{
			Kernel: k, Path: "/" + install.InitramfsPath(k), Size: r.Size, SHA256: r.SHA256, Modules: len(r.Modules),
		})
	}
	return res, nil
}

// copyCells adds the cells' sets to the store to, reading their objects
// from the store at src. The boot index of each kernel in to then lists
// exactly the sets of to.
func copyCells(ctx context.Context, src string, to *store.Store, cells []cell) ([]Driver, error) {
	from, err := store.Open(src)
	if err != nil {
		return nil, err
	}
	var out []Driver
	for _, c := range cells {
		var names []string
		for _, m := range c.m.Modules {
			names = append(names, m.Name)
		}
		// CopySet carries every object of the set: modules and, for NVIDIA,
		// the driver's supported-gpus.json.
		id, err := from.CopySet(ctx, to, c.id)
		if err != nil {
			return nil, fmt.Errorf("copy set %s (%s %s for %s): %w", c.id, c.m.Driver, c.m.Version, c.kernel, err)
		}
		if id != c.id {
			return nil, fmt.Errorf("copy set %s: stored as %s (the source manifest is not canonical)", c.id, id)
		}
		out = append(out, Driver{
			Recipe: c.recipe.Name, Driver: c.m.Driver, Version: c.m.Version, Flavor: c.m.Flavor,
			Kernel: c.kernel, SetID: c.id, CacheKey: c.m.CacheKey, Modules: names,
		})
	}
	return out, nil
}

// stagePackages unpacks each recipe's userspace packages under
// DriversDir/<version>/ and its firmware packages into the root.
func stagePackages(ctx context.Context, o Options, root string, res *Result) error {
	debs := filepath.Join(o.DownloadDir, "debs")
	seenFW := map[string]bool{}
	for _, r := range o.Recipes {
		version := r.Driver.Version
		for _, ref := range r.Userspace {
			if slices.Contains(res.Userspace[version], ref) {
				continue // another flavour of the same version brought it already
			}
			o.say("stage: userspace %s for %s %s", ref, r.Driver.Name, version)
			deb, err := downloadDeb(ctx, r, ref, debs, o.DownloadDir)
			if err != nil {
				return fmt.Errorf("recipe %s userspace: %w", r.Name, err)
			}
			if err := extractInto(ctx, o.Tools.Dpkg, deb, root, path.Join(DriversDir, version)); err != nil {
				return fmt.Errorf("recipe %s userspace: %w", r.Name, err)
			}
			if !slices.Contains(res.Userspace[version], ref) {
				res.Userspace[version] = append(res.Userspace[version], ref)
			}
		}
		if dir := r.UserspaceSourceDir(); dir != "" {
			ref := "source:" + r.UserspaceSource.Dir
			if !slices.Contains(res.Userspace[version], ref) {
				o.say("stage: userspace built from %s for %s %s", r.UserspaceSource.Dir, r.Driver.Name, version)
				if err := buildUserspace(ctx, o.Tools.Userspace, dir, version, root, path.Join(DriversDir, version)); err != nil {
					return fmt.Errorf("recipe %s userspace-source: %w", r.Name, err)
				}
				res.Userspace[version] = append(res.Userspace[version], ref)
			}
		}
		for _, ref := range r.Firmware {
			if seenFW[ref] {
				continue
			}
			seenFW[ref] = true
			o.say("stage: firmware %s", ref)
			deb, err := downloadDeb(ctx, r, ref, debs, o.DownloadDir)
			if err != nil {
				return fmt.Errorf("recipe %s firmware: %w", r.Name, err)
			}
			if err := extractFirmware(ctx, o.Tools.Dpkg, deb, root); err != nil {
				return fmt.Errorf("recipe %s firmware: %w", r.Name, err)
			}
			res.Firmware = append(res.Firmware, ref)
		}
	}
	return nil
}

// buildUserspace builds a recipe's userspace source in a scratch copy (the
// recipe's directory stays clean) and installs it under dest of the tree at
// root: "make VERSION=<version> DESTDIR=<scratch> install", with the host's
// compiler, then copied in (inside root).
func buildUserspace(ctx context.Context, u Userspace, src, version, root, dest string) error {
	if _, err := os.Stat(filepath.Join(src, "Makefile")); err != nil {
		return fmt.Errorf("userspace source %s: no Makefile: %w", src, err)
	}
	work, err := os.MkdirTemp("", "kpreload-userspace-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if err := u.CopySource(ctx, src, work); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	destdir, err := os.MkdirTemp("", "kpreload-userspace-dest-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(destdir)
	if err := u.MakeInstall(ctx, work, version, destdir); err != nil {
		return fmt.Errorf("make install in %s: %w", src, err)
	}
	return inroot.CopyTree(root, dest, destdir)
}

// extractInto unpacks the package deb (dpkg -x) into dir of the tree at
// root: into a scratch directory, then copied in (inside root).
func extractInto(ctx context.Context, dpkg Dpkg, deb, root, dir string) error {
	tmp, err := os.MkdirTemp("", "kpreload-deb-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := dpkg.Extract(ctx, deb, tmp); err != nil {
		return err
	}
	if err := inroot.CopyTree(root, dir, tmp); err != nil {
		return fmt.Errorf("unpack %s: %w", deb, err)
	}
	return nil
}

// copyRootfiles copies rootfiles.FS into root.
func copyRootfiles(root string) error {
	sub, err := fs.Sub(rootfiles.FS, "files")
	if err != nil {
		return err
	}
	return fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return inroot.MkdirAll(root, p, 0o755)
		}
		data, err := fs.ReadFile(sub, p)
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if info, err := d.Info(); err == nil && info.Mode()&0o111 != 0 {
			mode = 0o755
		}
		return writeIn(root, p, data, mode)
	})
}

// copyIn copies the host file src to name of the tree at root (parents
// created, everything resolved inside root) with mode, through a temporary
// file renamed into place.
func copyIn(src, root, name string, mode os.FileMode) error {
	if err := inroot.MkdirAll(root, path.Dir(name), 0o755); err != nil {
		return err
	}
	return inroot.CopyFile(root, name, src, mode)
}

// writeIn writes data to name of the tree at root (parents created,
// everything resolved inside root) with mode, through a temporary file
// renamed into place.
func writeIn(root, name string, data []byte, mode os.FileMode) error {
	if err := inroot.MkdirAll(root, path.Dir(name), 0o755); err != nil {
		return err
	}
	return inroot.WriteFile(root, name, data, mode)
}
