package recipe

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kpreload/kpreload/builder/archive"
)

// VersionPlaceholder stands, in source.path and supported-gpus.path of a
// recipe that selects its driver, for the upstream version selected, such
// as "usr/src/nvidia-current-{version}".
const VersionPlaceholder = "{version}"

// DriverSelector picks the newest version of a driver branch that a list of
// suites carries, such as the newest 550 of trixie, trixie-backports.
type DriverSelector struct {
	// Branch is the leading part of the upstream version, such as "550"
	// (550.163.01 and 550.54.15 belong to it, 555.58.02 does not).
	Branch string `yaml:"branch"`
	// Suites are where to look: Debian suites and pockets (trixie,
	// trixie-backports, sid, experimental, ...) and the names of the
	// recipe's extra archives (archives:, every suite of each).
	Suites []string `yaml:"suites"`
}

// String describes the selector, such as "newest 550 of trixie, trixie-backports".
func (s DriverSelector) String() string {
	return fmt.Sprintf("newest %s of %s", s.Branch, strings.Join(s.Suites, ", "))
}

// Selects reports whether the recipe selects its driver version from the
// archives (source.select) instead of pinning it.
func (r *Recipe) Selects() bool { return r.Source.Select != nil }

// InBranch reports whether the upstream version belongs to branch ("550"
// holds "550" and "550.163.01", not "5500.1").
func InBranch(upstream, branch string) bool {
	return upstream == branch || strings.HasPrefix(upstream, branch+".")
}

var branchRE = regexp.MustCompile(`^[0-9]+(?:\.[0-9]+)*$`)

// debianPockets are the suffixes a Debian suite's pockets add to its name.
var debianPockets = []string{"-updates", "-backports", "-security"}

// debianArchive returns the Debian suite whose private configuration
// carries pocket (trixie-backports: trixie), or an error naming the pockets.
func debianArchive(pocket string) (string, error) {
	suite := pocket
	for _, p := range debianPockets {
		if s, ok := strings.CutSuffix(pocket, p); ok {
			suite = s
			break
		}
	}
	if suite == "unstable" {
		suite = "sid"
	}
	if err := archive.CheckSuite(suite); err != nil {
		return "", fmt.Errorf("%q is neither a Debian suite (or its -updates, -backports, -security pocket) nor one of the recipe's archives: %w", pocket, err)
	}
	return suite, nil
}

// extra returns the recipe's extra archive called name, if it has one.
func (r *Recipe) extra(name string) (archive.Extra, bool) {
	i := slices.IndexFunc(r.Archives, func(x archive.Extra) bool { return x.Name == name })
	if i < 0 {
		return archive.Extra{}, false
	}
	x := r.Archives[i]
	x.Key = r.Path(x.Key)
	return x, true
}

// validateSelect checks source.select and the bare package names that go
// with it (the versions are the archive's to say).
func (r *Recipe) validateSelect() []error {
	var errs []error
	s := r.Source.Select
	if !branchRE.MatchString(s.Branch) {
		errs = append(errs, r.errorf("source.select.branch", "%q: want a driver branch, such as \"550\"", s.Branch))
	}
	if len(s.Suites) == 0 {
		errs = append(errs, r.errorf("source.select.suites", "missing; list the suites to look in, such as [trixie, trixie-backports]"))
	}
	for i, suite := range s.Suites {
		if _, ok := r.extra(suite); ok {
			continue
		}
		if _, err := debianArchive(suite); err != nil {
			errs = append(errs, r.errorf(fmt.Sprintf("source.select.suites[%d]", i), "%v", err))
		}
	}
	if r.Driver.Version != "" {
		errs = append(errs, r.errorf("driver.version", "%s: a recipe with source.select takes its version from the archive; leave driver.version out", r.Driver.Version))
	}
	if r.Suite != "" {
		errs = append(errs, r.errorf("suite", "%s: a recipe with source.select takes its packages from the suite the selected version is in; leave suite out", r.Suite))
	}
	bare := func(field, name string) {
		switch {
		case strings.Contains(name, "="):
			errs = append(errs, r.errorf(field, "%q: with source.select give the package name only; its version follows the selected driver", name))
		case !debNameRE.MatchString(name):
			errs = append(errs, r.errorf(field, "%q is not a Debian package name", name))
		}
	}
	if r.Source.Dir != "" {
		errs = append(errs, r.errorf("source.dir", "source.select picks a package's version; source.dir is the DKMS source itself: keep one"))
	}
	bare("source.package", r.Source.Package)
	if r.Source.Path == "" {
		errs = append(errs, r.errorf("source.path", "missing; give the DKMS source directory inside %s, such as usr/src/nvidia-current-%s", r.Source.Package, VersionPlaceholder))
	} else if e := r.validateRelPath("source.path", strings.ReplaceAll(r.Source.Path, VersionPlaceholder, "0")); e != nil {
		errs = append(errs, e)
	}
	for _, list := range []struct {
		field string
		names []string
	}{{"firmware", r.Firmware}, {"userspace", r.Userspace}} {
		for i, n := range list.names {
			f := fmt.Sprintf("%s[%d]", list.field, i)
			bare(f, n)
			if j := slices.Index(list.names[:i], n); j >= 0 {
				errs = append(errs, r.errorf(f, "package %s is listed twice (also %s[%d])", n, list.field, j))
			}
		}
	}
	if g := r.SupportedGPUs; g != nil {
		bare("supported-gpus.package", g.Package)
		if e := r.validateRelPath("supported-gpus.path", strings.ReplaceAll(g.Path, VersionPlaceholder, "0")); e != nil {
			errs = append(errs, e)
		}
	}
	return errs
}

// validateArchives checks the recipe's extra archives.
func (r *Recipe) validateArchives() []error {
	var errs []error
	for i, x := range r.Archives {
		f := fmt.Sprintf("archives[%d]", i)
		if err := x.Check(); err != nil {
			for _, e := range strings.Split(err.Error(), "\n") {
				field, msg, _ := strings.Cut(e, ": ")
				errs = append(errs, r.errorf(f+"."+field, "%s", msg))
			}
		}
		if j := slices.IndexFunc(r.Archives[:i], func(p archive.Extra) bool { return p.Name == x.Name }); j >= 0 {
			errs = append(errs, r.errorf(f+".name", "%s is used twice (also archives[%d])", x.Name, j))
		}
	}
	return errs
}

// Carrier answers which versions of a package an archive carries.
type Carrier interface {
	// Carried returns the versions of package name, each with the suite
	// (pocket) listing it and its Release file's date.
	Carried(ctx context.Context, name string) ([]archive.Carried, error)
}

// PackageArchives opens the archives recipes select from.
type PackageArchives interface {
	// Open returns the archive that carries suite, a Debian suite or pocket
	// (trixie-backports) or the name of one of r's extra archives, and the
	// name recipes give that archive in suite: (trixie; the extra archive's name).
	Open(r *Recipe, suite string) (Carrier, string, error)
}

// AptArchives opens Debian's suites and recipes' extra archives through
// builder/archive's private apt configurations under Cache, each once.
type AptArchives struct {
	// Cache holds the private configurations ("" is archive.DefaultCache()).
	Cache string

	mu   sync.Mutex
	open map[string]*archive.Archive
}

// Open implements PackageArchives.
func (a *AptArchives) Open(r *Recipe, suite string) (Carrier, string, error) {
	arc, err := a.archiveOf(r, suite)
	if err != nil {
		return nil, "", err
	}
	return arc, arc.Suite, nil
}

func (a *AptArchives) archiveOf(r *Recipe, suite string) (*archive.Archive, error) {
	cache := a.Cache
	if cache == "" {
		cache = archive.DefaultCache()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.open == nil {
		a.open = map[string]*archive.Archive{}
	}
	if x, ok := r.extra(suite); ok {
		// Keyed by everything that names it: two recipes may call different
		// archives by one name.
		id := fmt.Sprintf("extra %s %s %v %v %s", x.Name, x.URL, x.Suites, x.Components, x.Key)
		if arc, ok := a.open[id]; ok {
			return arc, nil
		}
		arc, err := archive.NewExtra(x, cache)
		if err != nil {
			return nil, err
		}
		a.open[id] = arc
		return arc, nil
	}
	name, err := debianArchive(suite)
	if err != nil {
		return nil, err
	}
	if arc, ok := a.open[name]; ok {
		return arc, nil
	}
	arc, err := archive.New(name, cache)
	if err != nil {
		return nil, err
	}
	a.open[name] = arc
	return arc, nil
}

// Archive returns the archive the recipe's packages are downloaded from:
// its suite, or the extra archive its suite names (a resolved recipe whose
// driver came from one).
func (r *Recipe) Archive(cache string) (*archive.Archive, error) {
	if x, ok := r.extra(r.Suite); ok {
		return archive.NewExtra(x, cache)
	}
	return archive.New(r.Suite, cache)
}

// DriverPick is the driver version a selector resolved to.
type DriverPick struct {
	// Selector is what the recipe asked for, such as "newest 550 of trixie, trixie-backports".
	Selector string
	// Version is the source package's Debian version, such as "550.163.01-4~bpo13+1".
	Version string
	// Suite is the suite (pocket) that lists it, such as "trixie-backports".
	Suite string
	// Published is the Date of that suite's Release file (see
	// archive.Carried); zero when the metadata has none.
	Published time.Time
}

// ResolveDriver returns the recipe pinned to the newest version its
// source.select finds in arcs: a copy whose driver.version, source.package,
// suite, firmware, userspace and supported-gpus name exact versions (each
// package's newest version of the same upstream version, in the suite that
// carries the driver, else anywhere in that archive), and what was picked.
// A recipe that pins is returned as it is, with a zero DriverPick. Errors
// name the file, the line and the field.
func (r *Recipe) ResolveDriver(ctx context.Context, arcs PackageArchives) (*Recipe, DriverPick, error) {
	return r.resolveDriver(ctx, arcs, "")
}

// PinDriver is ResolveDriver for one exact Debian version of the source
// package instead of the newest (what rebuilding a stored cell needs: the
// version its key names, which need not be the newest any more). The
// version must be in the recipe's branch and carried by one of its suites.
func (r *Recipe) PinDriver(ctx context.Context, arcs PackageArchives, version string) (*Recipe, DriverPick, error) {
	if r.Source.Select == nil {
		return r, DriverPick{}, nil
	}
	if version == "" {
		return nil, DriverPick{}, r.errorf("source.select", "no version to pin to")
	}
	return r.resolveDriver(ctx, arcs, version)
}

// resolveDriver resolves r's selector to version, or to the newest version
// of its branch when version is "".
func (r *Recipe) resolveDriver(ctx context.Context, arcs PackageArchives, version string) (*Recipe, DriverPick, error) {
	sel := r.Source.Select
	if sel == nil {
		return r, DriverPick{}, nil
	}
	type found struct {
		archive.Carried
		carrier Carrier
		suite   string // the archive's name for suite:
	}
	var best *found
	var seen []string
	for i, suite := range sel.Suites {
		c, name, err := arcs.Open(r, suite)
		if err != nil {
			return nil, DriverPick{}, r.errorf(fmt.Sprintf("source.select.suites[%d]", i), "%v", err)
		}
		all, err := c.Carried(ctx, r.Source.Package)
		if err != nil {
			return nil, DriverPick{}, r.errorf(fmt.Sprintf("source.select.suites[%d]", i), "%s: %v", r.Source.Package, err)
		}
		_, isExtra := r.extra(suite)
		for _, v := range all {
			if !isExtra && v.Suite != suite && !(suite == "unstable" && v.Suite == "sid") {
				continue
			}
			seen = append(seen, v.Version+" ("+v.Suite+")")
			if !InBranch(UpstreamVersion(v.Version), sel.Branch) || (version != "" && v.Version != version) {
				continue
			}
			if best == nil || CompareVersions(v.Version, best.Version) > 0 {
				best = &found{Carried: v, carrier: c, suite: name}
			}
		}
	}
	if best == nil {
		has := "none"
		if len(seen) > 0 {
			has = strings.Join(seen, ", ")
		}
		if version != "" {
			return nil, DriverPick{}, r.errorf("source.select", "%s: %s=%s is not in branch %s of these suites; they carry %s", sel, r.Source.Package, version, sel.Branch, has)
		}
		return nil, DriverPick{}, r.errorf("source.select", "%s: no version of %s in branch %s; the suites carry %s", sel, r.Source.Package, sel.Branch, has)
	}
	upstream := UpstreamVersion(best.Version)
	out := *r
	out.Source.Select = nil
	out.Source.Package = r.Source.Package + "=" + best.Version
	out.Source.Path = strings.ReplaceAll(r.Source.Path, VersionPlaceholder, upstream)
	out.Driver.Version = upstream
	out.Suite = best.suite
	var errs []error
	pin := func(field, name string) string {
		all, err := best.carrier.Carried(ctx, name)
		if err != nil {
			errs = append(errs, r.errorf(field, "%s: %v", name, err))
			return name
		}
		var pick, other string
		var has []string
		for _, v := range all {
			has = append(has, v.Version+" ("+v.Suite+")")
			if UpstreamVersion(v.Version) != upstream {
				continue
			}
			if v.Suite == best.Suite && (pick == "" || CompareVersions(v.Version, pick) > 0) {
				pick = v.Version
			}
			if other == "" || CompareVersions(v.Version, other) > 0 {
				other = v.Version
			}
		}
		if pick == "" {
			pick = other
		}
		if pick == "" {
			if len(has) == 0 {
				has = []string{"none"}
			}
			errs = append(errs, r.errorf(field, "%s: archive %s has no version %s to go with %s=%s; it has %s", name, best.suite, upstream, r.Source.Package, best.Version, strings.Join(has, ", ")))
			return name
		}
		return name + "=" + pick
	}
	out.Firmware = make([]string, len(r.Firmware))
	for i, n := range r.Firmware {
		out.Firmware[i] = pin(fmt.Sprintf("firmware[%d]", i), n)
	}
	out.Userspace = make([]string, len(r.Userspace))
	for i, n := range r.Userspace {
		out.Userspace[i] = pin(fmt.Sprintf("userspace[%d]", i), n)
	}
	if g := r.SupportedGPUs; g != nil {
		out.SupportedGPUs = &PackageFile{Package: pin("supported-gpus.package", g.Package), Path: strings.ReplaceAll(g.Path, VersionPlaceholder, upstream)}
	}
	if len(errs) > 0 {
		return nil, DriverPick{}, errors.Join(errs...)
	}
	return &out, DriverPick{Selector: sel.String(), Version: best.Version, Suite: best.Suite, Published: best.Published}, nil
}

// Resolution is one recipe resolved against the archives: its driver
// version and its kernels.
type Resolution struct {
	// Recipe is the recipe as written.
	Recipe *Recipe
	// Pinned is the recipe with its driver selection resolved (Recipe itself
	// when it pins its packages).
	Pinned *Recipe
	// Driver is what source.select picked (zero for a recipe that pins).
	Driver DriverPick
	// Kernels maps each kernel release of the matrix to the suite that carries it.
	Kernels map[string]string
}

// ResolveAll resolves every recipe's driver selection (ResolveDriver,
// against arcs) and kernel matrix (ResolveKernelSuites, against kernels):
// what a build of the recipes would build now. All problems are joined.
func ResolveAll(ctx context.Context, recipes []*Recipe, arcs PackageArchives, kernels KernelLister) ([]Resolution, error) {
	var (
		out  []Resolution
		errs []error
	)
	for _, r := range recipes {
		pinned, pick, err := r.ResolveDriver(ctx, arcs)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ks, err := r.ResolveKernelSuites(kernels)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, Resolution{Recipe: r, Pinned: pinned, Driver: pick, Kernels: ks})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}
