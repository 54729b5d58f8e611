package recipe

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/builder/dkms"
	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/kmodcache/modname"
)

var (
	recipeNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)
	moduleNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	// Debian policy: package names are lower case letters, digits, "+", "-"
	// and "."; versions are [epoch:]upstream[-revision], upstream starting with a digit.
	debNameRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
	debVersionRE = regexp.MustCompile(`^(?:[0-9]+:)?[0-9][A-Za-z0-9.+~:-]*$`)
	seriesRE     = regexp.MustCompile(`^[0-9]+\.[0-9]+$`)
	flavorRE     = regexp.MustCompile(`^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$`)
)

// signHashes are the digests the kernel's sign-file and module loader accept.
var signHashes = []string{"sha1", "sha224", "sha256", "sha384", "sha512"}

// Validate checks the recipe's values and returns every problem found,
// joined, each an *Error naming the file, line and field. For a source
// directory it also reads its dkms.conf and checks the version and modules
// against it.
func (r *Recipe) Validate() error {
	var errs []error
	add := func(field, format string, args ...any) { errs = append(errs, r.errorf(field, format, args...)) }

	switch {
	case r.Name == "":
		add("name", "missing; name the recipe, such as nvidia-535")
	case !recipeNameRE.MatchString(r.Name):
		add("name", "%q: use lower case letters, digits, '.', '_' and '-'", r.Name)
	}
	switch {
	case r.Driver.Name == "":
		add("driver.name", "missing; name the driver, such as nvidia")
	case nameError(r.Driver.Name) != nil:
		add("driver.name", "%v", nameError(r.Driver.Name))
	}
	switch {
	case r.Selects():
	case r.Driver.Version == "":
		add("driver.version", "missing; give the driver version, such as 535.261.03")
	case nameError(r.Driver.Version) != nil:
		add("driver.version", "%v", nameError(r.Driver.Version))
	}
	switch r.Flavor {
	case FlavorProprietary, FlavorOpen:
	case "":
		add("flavor", "missing; want %s or %s", FlavorProprietary, FlavorOpen)
	default:
		add("flavor", "%q: want %s or %s", r.Flavor, FlavorProprietary, FlavorOpen)
	}
	errs = append(errs, r.validateArchives()...)
	if r.Selects() {
		errs = append(errs, r.validateSelect()...)
	} else {
		errs = append(errs, r.validateSource()...)
		errs = append(errs, r.validatePackages("firmware", r.Firmware)...)
		errs = append(errs, r.validatePackages("userspace", r.Userspace)...)
	}
	errs = append(errs, r.validateModules()...)
	if s := r.SupportedGPUs; s != nil && !r.Selects() {
		if e := r.validatePin("supported-gpus.package", s.Package); e != nil {
			errs = append(errs, e)
		}
		if e := r.validateRelPath("supported-gpus.path", s.Path); e != nil {
			errs = append(errs, e)
		}
	}
	if s := r.Signing; s != nil {
		if s.Key == "" {
			add("signing.key", "missing; give the private key file (or a pkcs11: URI)")
		}
		if s.Cert == "" {
			add("signing.cert", "missing; give the X.509 certificate file")
		}
		if s.Hash != "" && !slices.Contains(signHashes, s.Hash) {
			add("signing.hash", "%q: want one of %s", s.Hash, strings.Join(signHashes, ", "))
		}
	}
	if _, extra := r.extra(r.Suite); r.Suite != "" && !extra {
		if err := archive.CheckSuite(r.Suite); err != nil {
			add("suite", "%v", err)
		}
	}
	if u := r.UserspaceSource; u != nil {
		// The directory itself is checked where it is used (image staging):
		// building modules does not need it.
		if u.Dir == "" || filepath.IsAbs(u.Dir) {
			add("userspace-source.dir", "%q: give the directory, relative to the recipe, whose Makefile installs the userspace", u.Dir)
		}
	}
	errs = append(errs, r.validatePatches()...)
	errs = append(errs, r.validateKernels()...)
	return errors.Join(errs...)
}

// validatePatches checks that every patch is a regular file inside the
// recipe's directory once links are followed (see PatchFiles), listed once,
// whose first lines say what it fixes: a patch without provenance is refused.
// A recipe built in code (no File) gets only the path checks.
func (r *Recipe) validatePatches() []error {
	var errs []error
	for i, p := range r.Patches {
		f := fmt.Sprintf("patches[%d]", i)
		if j := slices.Index(r.Patches[:i], p); j >= 0 {
			errs = append(errs, r.errorf(f, "%s is listed twice (also patches[%d])", p, j))
			continue
		}
		if r.File == "" {
			if p == "" || filepath.Clean(p) != p || !filepath.IsLocal(p) {
				errs = append(errs, r.errorf(f, "%q: give a clean path relative to the recipe file, inside its directory", p))
			}
			continue
		}
		file, e := r.patchFile(i, p)
		if e != nil {
			errs = append(errs, e)
			continue
		}
		data, err := inroot.ReadPath(file, MaxPatch)
		if err != nil {
			errs = append(errs, r.errorf(f, "%v", err))
			continue
		}
		if !PatchHasProvenance(data) {
			errs = append(errs, r.errorf(f, "%s does not start with what it fixes: begin the file with a description (what, on which kernels, why) before the first \"--- \" line", p))
		}
	}
	return errs
}

// PatchHasProvenance reports whether a patch file starts with a description
// of at least one non-empty line before its first hunk header ("--- ",
// "diff " or "Index: ").
func PatchHasProvenance(data []byte) bool {
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "--- ") || strings.HasPrefix(line, "diff ") || strings.HasPrefix(line, "Index: ") {
			return false
		}
		if strings.TrimSpace(line) != "" {
			return true
		}
	}
	return false
}

func (r *Recipe) validateSource() []error {
	var errs []error
	s := r.Source
	switch {
	case s.Package != "" && s.Dir != "":
		errs = append(errs, r.errorf("source.dir", "source.package and source.dir exclude each other; keep one"))
	case s.Package == "" && s.Dir == "":
		errs = append(errs, r.errorf("source", "missing; set source.package (a pinned Debian package, name=version) or source.dir (a directory with dkms.conf)"))
	case s.Package != "":
		if e := r.validatePin("source.package", s.Package); e != nil {
			errs = append(errs, e)
		} else if _, v, _ := SplitPackage(s.Package); r.Driver.Version != "" && UpstreamVersion(v) != r.Driver.Version {
			errs = append(errs, r.errorf("source.package", "version %s is not driver.version %s", v, r.Driver.Version))
		}
		if s.Path == "" {
			errs = append(errs, r.errorf("source.path", "missing; give the DKMS source directory inside %s, such as usr/src/nvidia-current-535.261.03", s.Package))
		} else if e := r.validateRelPath("source.path", s.Path); e != nil {
			errs = append(errs, e)
		}
	case s.Dir != "":
		if s.Path != "" {
			errs = append(errs, r.errorf("source.path", "source.path goes with source.package; source.dir is the DKMS source itself"))
		}
		if filepath.IsAbs(s.Dir) {
			errs = append(errs, r.errorf("source.dir", "%q is absolute; give it relative to the recipe file", s.Dir))
			break
		}
		if e := r.checkSourceTree(); len(e) > 0 {
			errs = append(errs, e...)
			break
		}
		errs = append(errs, r.checkSourceDir()...)
	}
	return errs
}

// checkSourceDir reads the source directory's dkms.conf and checks that it
// builds driver.version and every module the recipe keeps.
func (r *Recipe) checkSourceDir() []error {
	dir := r.SourceDir()
	conf := filepath.Join(dir, "dkms.conf")
	if _, err := os.Stat(conf); err != nil {
		return []error{r.errorf("source.dir", "%s has no dkms.conf: %v", dir, err)}
	}
	c, err := dkms.ReadConf(conf)
	if err != nil {
		return []error{r.errorf("source.dir", "%v", err)}
	}
	var errs []error
	if r.Driver.Version != "" && c.PackageVersion != r.Driver.Version {
		errs = append(errs, r.errorf("driver.version", "%s but %s says PACKAGE_VERSION=%q", r.Driver.Version, conf, c.PackageVersion))
	}
	var built []string
	for _, m := range c.Modules() {
		built = append(built, m.BuiltName)
	}
	for i, m := range r.Modules {
		if !slices.ContainsFunc(built, func(b string) bool { return modname.Same(b, m) }) {
			errs = append(errs, r.errorf(fmt.Sprintf("modules[%d]", i), "%q is not built by %s (it builds %s)", m, conf, strings.Join(built, ", ")))
		}
	}
	return errs
}

func (r *Recipe) validateModules() []error {
	if len(r.Modules) == 0 {
		return []error{r.errorf("modules", "missing; list the kernel modules to keep, such as [nvidia, nvidia-uvm]")}
	}
	var errs []error
	for i, m := range r.Modules {
		field := fmt.Sprintf("modules[%d]", i)
		if !moduleNameRE.MatchString(m) {
			errs = append(errs, r.errorf(field, "%q is not a module name (letters, digits, '_' and '-', no .ko)", m))
		}
		if j := slices.IndexFunc(r.Modules[:i], func(p string) bool { return modname.Same(p, m) }); j >= 0 {
			errs = append(errs, r.errorf(field, "%q is listed twice (also modules[%d])", m, j))
		}
	}
	return errs
}

func (r *Recipe) validatePackages(field string, refs []string) []error {
	var errs []error
	seen := map[string]int{}
	for i, ref := range refs {
		f := fmt.Sprintf("%s[%d]", field, i)
		if e := r.validatePin(f, ref); e != nil {
			errs = append(errs, e)
			continue
		}
		name, _, _ := SplitPackage(ref)
		if j, ok := seen[name]; ok {
			errs = append(errs, r.errorf(f, "package %s is listed twice (also %s[%d])", name, field, j))
		}
		seen[name] = i
	}
	return errs
}

// validatePin checks a pinned Debian package reference "name=version".
func (r *Recipe) validatePin(field, ref string) *Error {
	name, version, ok := SplitPackage(ref)
	switch {
	case ref == "":
		return r.errorf(field, "missing; give a pinned package, name=version")
	case !ok:
		return r.errorf(field, "%q: want a pinned package, name=version (such as nvidia-kernel-dkms=535.261.03-1)", ref)
	case !debNameRE.MatchString(name):
		return r.errorf(field, "%q is not a Debian package name", name)
	case !debVersionRE.MatchString(version):
		return r.errorf(field, "%q is not a Debian version", version)
	}
	return nil
}

// validateRelPath checks a path inside a package: relative, clean, not escaping.
func (r *Recipe) validateRelPath(field, p string) *Error {
	switch {
	case p == "":
		return r.errorf(field, "missing; give the path inside the package")
	case strings.HasPrefix(p, "/"):
		return r.errorf(field, "%q: give the path relative to the package root, without the leading /", p)
	case path.Clean(p) != p || p == "." || strings.HasPrefix(p, "../"):
		return r.errorf(field, "%q is not a clean relative path (want it as %q, inside the package)", p, path.Clean(p))
	}
	return nil
}

func (r *Recipe) validateKernels() []error {
	m := r.Kernels
	if len(m.Releases) == 0 && len(m.Select) == 0 {
		return []error{r.errorf("kernels", "missing or empty; list kernels.releases or kernels.select")}
	}
	var errs []error
	for i, rel := range m.Releases {
		f := fmt.Sprintf("kernels.releases[%d]", i)
		if _, err := ParseRelease(rel); err != nil {
			errs = append(errs, r.errorf(f, "%v", err))
		}
		if j := slices.Index(m.Releases[:i], rel); j >= 0 {
			errs = append(errs, r.errorf(f, "%s is listed twice (also kernels.releases[%d])", rel, j))
		}
	}
	for i, s := range m.Select {
		f := fmt.Sprintf("kernels.select[%d]", i)
		if !seriesRE.MatchString(s.Series) {
			errs = append(errs, r.errorf(f+".series", "%q: want a kernel series major.minor, such as \"6.1\" or \"6.12\"", s.Series))
		}
		if !flavorRE.MatchString(s.Flavor) {
			errs = append(errs, r.errorf(f+".flavor", "%q: want a Debian kernel flavour, such as cloud-amd64", s.Flavor))
		}
		if s.Suite != "" {
			if err := archive.CheckSuite(s.Suite); err != nil {
				errs = append(errs, r.errorf(f+".suite", "%v", err))
			}
		}
		if s.Newest < 1 {
			errs = append(errs, r.errorf(f+".newest", "%d: want how many of the newest releases to take, at least 1", s.Newest))
		}
		if j := slices.IndexFunc(m.Select[:i], func(p Selector) bool {
			return p.Series == s.Series && p.Flavor == s.Flavor && suiteName(p.Suite) == suiteName(s.Suite)
		}); j >= 0 {
			errs = append(errs, r.errorf(f, "selects %s %s again (also kernels.select[%d])", s.Series, s.Flavor, j))
		}
	}
	return errs
}
