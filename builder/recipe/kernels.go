package recipe

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/internal/none"
)

// KernelLister lists the kernel releases that can be built for.
type KernelLister interface {
	// Available returns kernel releases (uname -r), such as "6.1.0-56-cloud-amd64".
	Available() ([]string, error)
}

// ListerFunc adapts a function to KernelLister.
type ListerFunc func() ([]string, error)

// Available calls f.
func (f ListerFunc) Available() ([]string, error) { return f() }

// SuiteLister is a KernelLister that can also list the kernels of other
// Debian suites (recipes and selectors that name a suite).
type SuiteLister interface {
	KernelLister
	// InSuite returns the lister of suite ("" is the default suite).
	InSuite(suite string) (KernelLister, error)
}

// AptLister lists the kernels of a Debian suite through builder/archive
// (kpreload's private apt configuration of the suite under the cache): the releases for which both
// linux-image-<release> and linux-headers-<release> exist (DKMS needs the
// headers, the image boots), leaving out the -unsigned and -dbg variants and
// the metapackages. It asks apt once per suite and remembers the answer;
// make a new lister to ask again.
type AptLister struct {
	// Suite is the suite listed by Available ("" is archive.DefaultSuite).
	Suite string
	// Cache holds private apt configurations ("" is archive.DefaultCache()).
	Cache string

	mu     sync.Mutex
	cache  []string
	suites map[string]*AptLister
}

// AptKernels returns the real lister of the default suite, backed by apt;
// its InSuite lists other suites.
func AptKernels() SuiteLister { return &AptLister{} }

// AptKernelsIn is AptKernels with its private apt configurations under the
// download cache dir ("" is archive.DefaultCache()).
func AptKernelsIn(dir string) SuiteLister { return &AptLister{Cache: dir} }

// InSuite returns the lister of suite, sharing this one's cache directory.
func (a *AptLister) InSuite(suite string) (KernelLister, error) {
	if suite == "" {
		suite = archive.DefaultSuite
	}
	own := a.Suite
	if own == "" {
		own = archive.DefaultSuite
	}
	if suite == own {
		return a, nil
	}
	if err := archive.CheckSuite(suite); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.suites == nil {
		a.suites = map[string]*AptLister{}
	}
	l, ok := a.suites[suite]
	if !ok {
		l = &AptLister{Suite: suite, Cache: a.Cache}
		a.suites[suite] = l
	}
	return l, nil
}

// Available asks the suite's archive for linux-image and linux-headers
// packages and returns the releases that have both, sorted.
func (a *AptLister) Available() ([]string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cache != nil {
		return slices.Clone(a.cache), nil
	}
	cache := a.Cache
	if cache == "" {
		cache = archive.DefaultCache()
	}
	arc, err := archive.New(a.Suite, cache)
	if err != nil {
		return nil, err
	}
	names, err := arc.Search(context.Background(), `^linux-(image|headers)-[0-9]`)
	if err != nil {
		return nil, fmt.Errorf("list kernels: %w", err)
	}
	rels := parseAptKernels([]byte(strings.Join(names, "\n")))
	if len(rels) == 0 {
		return nil, fmt.Errorf("suite %s: apt knows no linux-image/linux-headers pairs (package lists: %s)", arc.Suite, arc.Dir)
	}
	a.cache = rels
	return slices.Clone(rels), nil
}

// parseAptKernels reads "apt-cache search" output ("name - description"
// lines) and returns the releases with both an image and a headers package.
func parseAptKernels(out []byte) []string {
	images, headers := map[string]bool{}, map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		name, _, _ := strings.Cut(sc.Text(), " ")
		var set map[string]bool
		rel, ok := strings.CutPrefix(name, "linux-image-")
		if ok {
			set = images
		} else if rel, ok = strings.CutPrefix(name, "linux-headers-"); ok {
			set = headers
		} else {
			continue
		}
		if strings.HasSuffix(rel, "-unsigned") || strings.HasSuffix(rel, "-dbg") {
			continue
		}
		if _, err := ParseRelease(rel); err != nil {
			continue // metapackages such as linux-image-6.12-cloud-amd64
		}
		set[rel] = true
	}
	var rels []string
	for rel := range images {
		if headers[rel] {
			rels = append(rels, rel)
		}
	}
	slices.SortFunc(rels, CompareReleases)
	return rels
}

// Resolve returns the kernels the matrix names: each explicit release (which
// must be available) and, for each selector, the newest Newest available
// releases of its series and flavour (fewer if fewer exist, an error if none).
// The result is deduplicated and sorted oldest first.
func (m Matrix) Resolve(l KernelLister) ([]string, error) {
	found, errs := m.resolve(l, "")
	if len(errs) > 0 {
		var joined []error
		for _, e := range errs {
			joined = append(joined, fmt.Errorf("kernels.%s: %s", e.Field, e.Msg))
		}
		return nil, errors.Join(joined...)
	}
	return releasesOf(found), nil
}

// ResolveKernels resolves the recipe's kernel matrix (see Matrix.Resolve);
// errors name the recipe file, the line and the field.
func (r *Recipe) ResolveKernels(l KernelLister) ([]string, error) {
	found, err := r.ResolveKernelSuites(l)
	if err != nil {
		return nil, err
	}
	return releasesOf(found), nil
}

// ResolveKernelSuites is ResolveKernels that also says which suite carries
// each release (the suite to fetch it from): selectors look in their own
// suite, explicit releases in the default suite, then the recipe's suite,
// then the selectors' suites.
func (r *Recipe) ResolveKernelSuites(l KernelLister) (map[string]string, error) {
	suite := r.Suite
	if _, ok := r.extra(suite); ok {
		suite = "" // an extra archive carries the driver, not kernels
	}
	found, errs := r.Kernels.resolve(l, suite)
	if len(errs) > 0 {
		joined := make([]error, 0, len(errs))
		for _, e := range errs {
			field := "kernels"
			if e.Field != "" {
				field += "." + e.Field
			}
			joined = append(joined, r.errorf(field, "%s", e.Msg))
		}
		return nil, errors.Join(joined...)
	}
	return found, nil
}

// releasesOf returns the releases of a release->suite map, oldest first.
func releasesOf(found map[string]string) []string {
	out := make([]string, 0, len(found))
	for rel := range found {
		out = append(out, rel)
	}
	slices.SortFunc(out, CompareReleases)
	return out
}

// suiteName spells the default suite "" as its name.
func suiteName(s string) string {
	if s == "" {
		return archive.DefaultSuite
	}
	return s
}

// resolve does Resolve's work: it returns release -> suite; errors carry the
// field within the matrix. recipeSuite is the recipe's own suite ("" if none).
func (m Matrix) resolve(l KernelLister, recipeSuite string) (map[string]string, []*Error) {
	// The suites to look in, in order, and what each carries.
	order := []string{archive.DefaultSuite}
	for _, s := range append([]string{recipeSuite}, selectorSuites(m.Select)...) {
		if s = suiteName(s); !slices.Contains(order, s) {
			order = append(order, s)
		}
	}
	parsed := map[string]map[string]Release{}
	var errs []*Error
	listed := func(suite string) (map[string]Release, *Error) {
		if p, ok := parsed[suite]; ok {
			return p, nil
		}
		lister := l
		if suite != archive.DefaultSuite {
			sl, ok := l.(SuiteLister)
			if !ok {
				return nil, &Error{Msg: fmt.Sprintf("cannot list the kernels of suite %s with this lister", suite)}
			}
			var err error
			if lister, err = sl.InSuite(suite); err != nil {
				return nil, &Error{Msg: err.Error()}
			}
		}
		avail, err := lister.Available()
		if err != nil {
			if suite == archive.DefaultSuite {
				return nil, &Error{Msg: fmt.Sprintf("list available kernels: %v", err)}
			}
			return nil, &Error{Msg: fmt.Sprintf("list available %s kernels: %v", suite, err)}
		}
		p := map[string]Release{}
		for _, a := range avail {
			if rel, err := ParseRelease(a); err == nil {
				p[a] = rel
			}
		}
		parsed[suite] = p
		return p, nil
	}
	out := map[string]string{}
	for i, want := range m.Releases {
		var (
			where  string
			seen   []string
			failed bool
		)
		// A release names its own suite too ("+deb13": trixie).
		lookIn := order
		if own := archive.KernelSuite(want); !slices.Contains(order, own) {
			lookIn = append(slices.Clone(order), own)
		}
		for _, suite := range lookIn {
			p, e := listed(suite)
			if e != nil {
				if suite == archive.DefaultSuite || suite == suiteName(recipeSuite) {
					e.Field = fmt.Sprintf("releases[%d]", i)
					errs = append(errs, e)
					failed = true
				}
				continue
			}
			if _, ok := p[want]; ok {
				where = suite
				break
			}
			if rel, err := ParseRelease(want); err == nil {
				in := ""
				if len(lookIn) > 1 {
					in = " in " + suite
				}
				seen = append(seen, fmt.Sprintf("available %s kernels%s: %s", rel.Flavor, in, none.List(matching(p, "", rel.Flavor))))
			}
		}
		switch {
		case where != "":
			out[want] = where
		case failed:
		default:
			msg := fmt.Sprintf("kernel %s is not available", want)
			if _, err := ParseRelease(want); err == nil {
				msg += "; " + strings.Join(seen, "; ")
			} else {
				msg += "; " + err.Error()
			}
			errs = append(errs, &Error{Field: fmt.Sprintf("releases[%d]", i), Msg: msg})
		}
	}
	for i, s := range m.Select {
		suite := suiteName(s.Suite)
		p, e := listed(suite)
		if e != nil {
			e.Field = fmt.Sprintf("select[%d]", i)
			errs = append(errs, e)
			continue
		}
		got := matching(p, s.Series, s.Flavor)
		if len(got) == 0 {
			in := ""
			if s.Suite != "" {
				in = " in " + suite
			}
			errs = append(errs, &Error{Field: fmt.Sprintf("select[%d]", i), Msg: fmt.Sprintf("%s: no such kernel is available; available %s kernels%s: %s", s, s.Flavor, in, none.List(matching(p, "", s.Flavor)))})
			continue
		}
		if s.Newest >= 1 && len(got) > s.Newest {
			got = got[len(got)-s.Newest:]
		}
		for _, rel := range got {
			if _, ok := out[rel]; !ok {
				out[rel] = suite
			}
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// selectorSuites returns the suites the selectors name.
func selectorSuites(sel []Selector) []string {
	var out []string
	for _, s := range sel {
		out = append(out, s.Suite)
	}
	return out
}

// matching returns the releases of a series ("" for any) and flavour, oldest first.
func matching(parsed map[string]Release, series, flavor string) []string {
	var out []string
	for s, r := range parsed {
		if r.Flavor == flavor && (series == "" || r.Series() == series) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, CompareReleases)
	return out
}

// StaticLister is a SuiteLister over fixed lists, for tests and offline
// checks: Suites maps a suite ("" is the default suite) to its releases; a
// suite it lacks has the Default releases.
type StaticLister struct {
	// Default are the releases of every suite Suites does not name.
	Default []string
	// Suites are the releases of particular suites.
	Suites map[string][]string
}

// Available returns the default suite's releases.
func (s StaticLister) Available() ([]string, error) {
	return s.list(archive.DefaultSuite), nil
}

// InSuite returns the lister of suite.
func (s StaticLister) InSuite(suite string) (KernelLister, error) {
	rels := s.list(suiteName(suite))
	return ListerFunc(func() ([]string, error) { return rels, nil }), nil
}

func (s StaticLister) list(suite string) []string {
	if rels, ok := s.Suites[suite]; ok {
		return slices.Clone(rels)
	}
	if suite == archive.DefaultSuite {
		if rels, ok := s.Suites[""]; ok {
			return slices.Clone(rels)
		}
	}
	return slices.Clone(s.Default)
}
