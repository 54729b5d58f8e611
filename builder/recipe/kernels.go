package recipe

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
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

// AptLister lists the kernels of the configured apt archive: the releases
// for which both linux-image-<release> and linux-headers-<release> exist
// (DKMS needs the headers, the image boots), leaving out the -unsigned and
// -dbg variants and the metapackages. It asks apt once and remembers the
// answer; make a new lister to ask again.
type AptLister struct {
	// AptCache is the apt-cache program; "" means "apt-cache" on $PATH.
	AptCache string

	mu    sync.Mutex
	cache []string
}

// AptKernels returns the real lister, backed by apt-cache.
func AptKernels() KernelLister { return &AptLister{} }

// Available runs "apt-cache search --names-only" for linux-image and
// linux-headers packages and returns the releases that have both, sorted.
func (a *AptLister) Available() ([]string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cache != nil {
		return slices.Clone(a.cache), nil
	}
	prog := a.AptCache
	if prog == "" {
		prog = "apt-cache"
	}
	cmd := exec.Command(prog, "search", "--names-only", `^linux-(image|headers)-[0-9]`)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("list kernels with %s search: %w: %s", prog, err, strings.TrimSpace(stderr.String()))
	}
	rels := parseAptKernels(out)
	if len(rels) == 0 {
		return nil, fmt.Errorf("apt-cache knows no linux-image/linux-headers pairs: run apt-get update (scripts/deps.sh sets up the apt sources)")
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
	rels, errs := m.resolve(l)
	if len(errs) > 0 {
		var joined []error
		for _, e := range errs {
			joined = append(joined, fmt.Errorf("kernels.%s: %s", e.Field, e.Msg))
		}
		return nil, errors.Join(joined...)
	}
	return rels, nil
}

// ResolveKernels resolves the recipe's kernel matrix (see Matrix.Resolve);
// errors name the recipe file, the line and the field.
func (r *Recipe) ResolveKernels(l KernelLister) ([]string, error) {
	rels, errs := r.Kernels.resolve(l)
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
	return rels, nil
}

// resolve does Resolve's work; errors carry the field within the matrix.
func (m Matrix) resolve(l KernelLister) ([]string, []*Error) {
	avail, err := l.Available()
	if err != nil {
		return nil, []*Error{{Msg: fmt.Sprintf("list available kernels: %v", err)}}
	}
	parsed := map[string]Release{}
	for _, a := range avail {
		if rel, err := ParseRelease(a); err == nil {
			parsed[a] = rel
		}
	}
	var (
		out  []string
		errs []*Error
	)
	for i, want := range m.Releases {
		if _, ok := parsed[want]; ok {
			out = append(out, want)
			continue
		}
		msg := fmt.Sprintf("kernel %s is not available", want)
		if rel, err := ParseRelease(want); err == nil {
			msg += fmt.Sprintf("; available %s kernels: %s", rel.Flavor, listOrNone(matching(parsed, "", rel.Flavor)))
		} else {
			msg += "; " + err.Error()
		}
		errs = append(errs, &Error{Field: fmt.Sprintf("releases[%d]", i), Msg: msg})
	}
	for i, s := range m.Select {
		got := matching(parsed, s.Series, s.Flavor)
		if len(got) == 0 {
			errs = append(errs, &Error{Field: fmt.Sprintf("select[%d]", i), Msg: fmt.Sprintf("%s: no such kernel is available; available %s kernels: %s", s, s.Flavor, listOrNone(matching(parsed, "", s.Flavor)))})
			continue
		}
		if s.Newest >= 1 && len(got) > s.Newest {
			got = got[len(got)-s.Newest:]
		}
		out = append(out, got...)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	slices.SortFunc(out, CompareReleases)
	return slices.Compact(out), nil
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

// listOrNone joins releases with spaces, or says "(none)".
func listOrNone(rels []string) string {
	if len(rels) == 0 {
		return "(none)"
	}
	return strings.Join(rels, " ")
}
