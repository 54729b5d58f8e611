// Package recipe reads driver recipes: YAML files that say which driver to
// build (name, version, flavour), where its DKMS source comes from (a pinned
// Debian package or a directory next to the recipe), which modules to keep,
// the firmware and version-matched userspace packages that go with them, the
// supported-GPU list, optional module signing, and the kernel matrix.
//
// Loading is strict: unknown fields, wrong types and invalid values are
// errors, and every error names the file, the line and the field.
package recipe

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/internal/inroot"
)

// Flavours a recipe may declare.
const (
	// FlavorProprietary is NVIDIA's closed kernel module flavour (and any
	// driver whose kernel module source is not open).
	FlavorProprietary = "proprietary"
	// FlavorOpen is an open-source kernel module flavour (NVIDIA's open GPU
	// kernel modules, or an out-of-tree GPL driver such as the test driver).
	FlavorOpen = "open"
)

// DefaultSignHash is the hash used for module signatures when a recipe's
// signing section names none; Debian's kernels use CONFIG_MODULE_SIG_HASH="sha256".
const DefaultSignHash = "sha256"

// Recipe is one driver recipe, as read from a YAML file.
type Recipe struct {
	// File is the path the recipe was loaded from ("" for one built in code).
	File string `yaml:"-"`
	// Name identifies the recipe, such as "nvidia-535-open".
	Name string `yaml:"name"`
	// Driver is the driver name and version the built modules carry.
	Driver Driver `yaml:"driver"`
	// Source is where the DKMS source comes from.
	Source Source `yaml:"source"`
	// Flavor is FlavorProprietary or FlavorOpen.
	Flavor string `yaml:"flavor"`
	// Modules are the kernel module names to keep from the build, as the
	// driver's dkms.conf builds them (BUILT_MODULE_NAME), such as "nvidia-uvm".
	Modules []string `yaml:"modules"`
	// Firmware are the pinned firmware packages ("name=version") the modules request.
	Firmware []string `yaml:"firmware"`
	// Userspace are the pinned packages ("name=version") whose version must
	// match the kernel modules, carried side by side per driver version.
	Userspace []string `yaml:"userspace"`
	// UserspaceSource, if set, is the driver's userspace as source: a
	// directory (relative to the recipe) whose Makefile's "install" target,
	// run as "make VERSION=<driver version> DESTDIR=<dir> install", installs
	// it. Images carry the result under the version's userspace directory,
	// beside (or instead of) unpacked Userspace packages.
	UserspaceSource *SourceDir `yaml:"userspace-source"`
	// SupportedGPUs is where the driver's supported-gpus.json comes from, if anywhere.
	SupportedGPUs *PackageFile `yaml:"supported-gpus"`
	// Signing, if set, signs the built modules with the kernel's sign-file.
	Signing *Signing `yaml:"signing"`
	// Kernels is the kernel matrix to build for.
	Kernels Matrix `yaml:"kernels"`
	// Suite is the Debian suite the recipe's packages (source, firmware,
	// userspace, supported-gpus) come from, such as "trixie"; "" means
	// archive.DefaultSuite (bookworm).
	Suite string `yaml:"suite"`
	// Archives are extra apt archives (URL, suites, components, signing
	// key relative to the recipe, inside its directory) that
	// source.select.suites may name.
	Archives []archive.Extra `yaml:"archives"`
	// Patches are patch files (relative to the recipe file, inside its
	// directory once links are followed: see PatchFiles) applied with
	// "patch -p1" to a copy of the DKMS source before dkms runs, in order.
	// They are part of every cell's content key.
	Patches []string `yaml:"patches"`

	// lines maps field paths ("kernels.select[0].newest") to the line where
	// they appear in File; Validate and ResolveKernels use it to locate problems.
	lines map[string]int
}

// Driver names the driver and its version.
type Driver struct {
	// Name is the driver's name, such as "nvidia" or "kpreload-edu".
	Name string `yaml:"name"`
	// Version is the driver version, such as "535.261.03"; it equals the DKMS
	// PACKAGE_VERSION and the upstream part of the source package's version.
	Version string `yaml:"version"`
}

// SourceDir is a directory of source, relative to the recipe file.
type SourceDir struct {
	Dir string `yaml:"dir"`
}

// UserspaceSourceDir returns the absolute userspace source directory, or ""
// when the recipe has none.
func (r *Recipe) UserspaceSourceDir() string {
	if r.UserspaceSource == nil || r.UserspaceSource.Dir == "" {
		return ""
	}
	return r.Path(r.UserspaceSource.Dir)
}

// Source says where the DKMS source tree comes from: exactly one of Package
// (with Path) or Dir.
type Source struct {
	// Package is a pinned Debian package, "name=version", such as
	// "nvidia-kernel-dkms=535.261.03-1".
	Package string `yaml:"package"`
	// Path is the DKMS source directory inside Package, relative to the
	// package root, such as "usr/src/nvidia-current-535.261.03".
	Path string `yaml:"path"`
	// Select, if set, picks the version of Package (then a bare package
	// name) from the archives at build time, such as the newest 550 of
	// trixie, trixie-backports; Path may hold VersionPlaceholder.
	Select *DriverSelector `yaml:"select"`
	// Dir is a directory holding dkms.conf, relative to the recipe file
	// (the project's test driver). It, and every link in the tree under it,
	// must lead inside the recipe's directory once links are followed.
	Dir string `yaml:"dir"`
}

// PackageFile is one file inside a pinned Debian package.
type PackageFile struct {
	// Package is the pinned package, "name=version".
	Package string `yaml:"package"`
	// Path is the file's path inside the package, relative to its root.
	Path string `yaml:"path"`
}

// Signing configures module signing with the kernel's scripts/sign-file.
type Signing struct {
	// Key is the private key (PEM file, relative to the recipe file, or a PKCS#11 URI).
	Key string `yaml:"key"`
	// Cert is the X.509 certificate (relative to the recipe file).
	Cert string `yaml:"cert"`
	// Hash is the digest algorithm; "" means DefaultSignHash.
	Hash string `yaml:"hash"`
}

// Matrix is the set of kernels a recipe builds for: explicit releases plus
// the releases its selectors pick from what the archive offers.
type Matrix struct {
	// Releases are explicit kernel releases (uname -r), such as "6.1.0-56-cloud-amd64".
	Releases []string `yaml:"releases"`
	// Select picks the newest releases of a series and flavour.
	Select []Selector `yaml:"select"`
}

// Selector picks the Newest releases of one kernel series and flavour, such
// as the newest 3 of 6.1 cloud-amd64.
type Selector struct {
	// Series is the kernel's major.minor, such as "6.1" or "6.12".
	Series string `yaml:"series"`
	// Flavor is the Debian kernel flavour, such as "cloud-amd64".
	Flavor string `yaml:"flavor"`
	// Newest is how many of the newest releases to take (at least 1).
	Newest int `yaml:"newest"`
	// Suite is the Debian suite whose kernels are listed, such as "trixie";
	// "" means archive.DefaultSuite (bookworm, with bookworm-backports).
	Suite string `yaml:"suite"`
}

// String describes the selector, such as "newest 3 of 6.1 cloud-amd64".
func (s Selector) String() string {
	str := fmt.Sprintf("newest %d of %s %s", s.Newest, s.Series, s.Flavor)
	if s.Suite != "" {
		str += " in " + s.Suite
	}
	return str
}

// Load reads, strictly decodes and validates the recipe at path, with the
// extra archives of the SharedArchivesFile beside it; the key files of
// extra archives must lie beside the recipes (confineKey). Errors name
// the file, the line and the field; all problems found are joined.
func Load(path string) (*Recipe, error) {
	data, err := inroot.ReadPath(path, MaxFile)
	if err != nil {
		return nil, fmt.Errorf("read recipe: %w", err)
	}
	r, err := Parse(path, data)
	if err != nil {
		return nil, err
	}
	keyErrs := r.confineKeys()
	if err := r.addShared(); err != nil {
		return nil, err
	}
	if err := errors.Join(append(keyErrs, r.Validate())...); err != nil {
		return nil, err
	}
	return r, nil
}

// LoadDir loads every *.yaml recipe directly in dir (but SharedArchivesFile), sorted by file name,
// and checks that recipe names are unique. It reports the problems of all
// files at once.
func LoadDir(dir string) ([]*Recipe, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("list recipes in %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no recipes (*.yaml) in %s", dir)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return filepath.Base(f) == SharedArchivesFile })
	if len(files) == 0 {
		return nil, fmt.Errorf("no recipes (*.yaml) in %s", dir)
	}
	slices.Sort(files)
	var (
		recipes []*Recipe
		errs    []error
		byName  = map[string]*Recipe{}
	)
	for _, f := range files {
		r, err := Load(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if prev, ok := byName[r.Name]; ok {
			errs = append(errs, r.errorf("name", "recipe name %q is already used by %s", r.Name, prev.File))
			continue
		}
		byName[r.Name] = r
		recipes = append(recipes, r)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return recipes, nil
}

// Path resolves p relative to the directory of the recipe file; absolute
// paths and PKCS#11 URIs are returned unchanged.
func (r *Recipe) Path(p string) string {
	if p == "" || filepath.IsAbs(p) || strings.HasPrefix(p, "pkcs11:") {
		return p
	}
	return filepath.Join(filepath.Dir(r.File), p)
}

// SourceDir is the test-driver style source directory resolved against the
// recipe file, or "" when the source is a package.
func (r *Recipe) SourceDir() string {
	if r.Source.Dir == "" {
		return ""
	}
	return r.Path(r.Source.Dir)
}

// SplitPackage splits a pinned package reference "name=version" into its
// name and version; ok is false when there is no "=" or either side is empty.
func SplitPackage(ref string) (name, version string, ok bool) {
	name, version, found := strings.Cut(ref, "=")
	if !found || name == "" || version == "" {
		return name, version, false
	}
	return name, version, true
}

// UpstreamVersion returns the upstream part of a Debian version: without the
// epoch ("1:") and the Debian revision (after the last "-"), so that
// "535.216.03-3~deb12u1" gives "535.216.03".
func UpstreamVersion(v string) string {
	if i := strings.IndexByte(v, ':'); i >= 0 && isDigits(v[:i]) {
		v = v[i+1:]
	}
	if i := strings.LastIndexByte(v, '-'); i >= 0 {
		v = v[:i]
	}
	return v
}
