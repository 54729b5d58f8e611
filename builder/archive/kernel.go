package archive

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/internal/none"
	"github.com/kpreload/kpreload/internal/versort"
	"github.com/kpreload/kpreload/kmodcache/names"
)

// completeMarker is the file whose presence says an unpacked kernel is whole.
const completeMarker = ".complete"

// cloudKernels matches the names of the cloud kernel image packages, the
// kernels an error lists when the one asked for is not in the archive.
const cloudKernels = `^linux-image-[0-9.]+.*-cloud-amd64$`

// releasePattern is what a kernel release may look like: it becomes a
// package name and a directory name.
var releasePattern = regexp.MustCompile(`^[0-9][A-Za-z0-9.+~_-]*$`)

// KernelDir returns where release is unpacked: <cache>/kernels/<release>.
func KernelDir(cache, release string) string {
	return filepath.Join(cache, "kernels", release)
}

// KernelUnpacked reports whether KernelDir holds a whole kernel (its
// .complete marker).
func KernelUnpacked(cache, release string) bool {
	_, err := os.Stat(filepath.Join(KernelDir(cache, release), completeMarker))
	return err == nil
}

// KernelNotFoundError says that a suite has no image package for a kernel.
type KernelNotFoundError struct {
	// Release and Suite are what was asked for.
	Release, Suite string
	// Available are the suite's cloud kernels, oldest first.
	Available []string
}

// Error names the kernel, the suite and the cloud kernels it has.
func (e *KernelNotFoundError) Error() string {
	avail := none.Or(strings.Join(e.Available, " "))
	return fmt.Sprintf("kernel %s is not in the apt archive (suite %s); available cloud kernels: %s", e.Release, e.Suite, avail)
}

// debPackage is a package pinned to a version.
type debPackage struct{ name, version string }

// FetchKernel makes sure Debian kernel release of this suite is unpacked
// under KernelDir(cache, release) and returns that directory. A kernel
// already there (with its .complete marker) is kept as it is and nothing is
// asked of apt. Otherwise it downloads into <cache>/debs the image package
// (linux-image-<release>-unsigned when the suite has it, the signed image
// being a package around it), linux-headers-<release> and the headers'
// linux-headers-* and linux-kbuild-* dependencies, each at apt's candidate
// version; unpacks them with dpkg -x into a temporary directory under
// <cache>/kernels; moves usr/lib/modules/<release> to lib/modules (merged-/usr
// packages); runs depmod -b when the package has no modules.dep; and renames
// the tree into place with its .complete marker, so a fetch that is
// interrupted leaves nothing half-made. progress, if set, gets one line per
// step.
func (a *Archive) FetchKernel(ctx context.Context, release, cache string, progress func(string)) (string, error) {
	if err := names.Check("kernel release", release); err != nil || !releasePattern.MatchString(release) {
		return "", fmt.Errorf("kernel %.72q: not a kernel release (want one such as 6.1.0-56-cloud-amd64; %s)", release, names.Allowed)
	}
	dest := KernelDir(cache, release)
	if KernelUnpacked(cache, release) {
		return dest, nil
	}
	say := func(format string, args ...any) {
		if progress != nil {
			progress(fmt.Sprintf(format, args...))
		}
	}
	say("fetching kernel %s (%s)", release, a.Suite)
	pkgs, err := a.kernelPackages(ctx, release)
	if err != nil {
		return "", err
	}
	var debs []string
	for _, p := range pkgs {
		say("  %s=%s", p.name, p.version)
		deb, err := a.Download(ctx, p.name, p.version, filepath.Join(cache, "debs"))
		if err != nil {
			return "", fmt.Errorf("kernel %s: %w", release, err)
		}
		debs = append(debs, deb)
	}
	kernels := filepath.Join(cache, "kernels")
	if err := os.MkdirAll(kernels, 0o755); err != nil {
		return "", fmt.Errorf("kernel %s: %w", release, err)
	}
	tmp, err := os.MkdirTemp(kernels, ".tmp.")
	if err != nil {
		return "", fmt.Errorf("kernel %s: %w", release, err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	for _, deb := range debs {
		if err := Extract(ctx, deb, tmp); err != nil {
			return "", fmt.Errorf("kernel %s: %w", release, err)
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("kernel %s: %w", release, err)
	}
	if err := finishKernel(ctx, runner.Or(a.run), tmp, release, pkgs[0].name); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, completeMarker), nil, 0o644); err != nil {
		return "", fmt.Errorf("kernel %s: %w", release, err)
	}
	if err := os.Rename(tmp, dest); err != nil {
		// Another fetch may have put it in place meanwhile.
		if KernelUnpacked(cache, release) {
			return dest, nil
		}
		// A directory without the marker is no kernel: what is left of a
		// tree made by hand, or by an older tool. It is moved aside (never
		// a complete tree another fetch just renamed there) and removed.
		stale, serr := os.MkdirTemp(filepath.Dir(dest), ".stale-"+release+"-")
		if serr != nil {
			return "", fmt.Errorf("kernel %s: %w", release, serr)
		}
		defer os.RemoveAll(stale)
		if err := os.Rename(dest, filepath.Join(stale, "tree")); err != nil {
			return "", fmt.Errorf("kernel %s: %w", release, err)
		}
		if err := os.Rename(tmp, dest); err != nil {
			if KernelUnpacked(cache, release) {
				return dest, nil
			}
			return "", fmt.Errorf("kernel %s: %w", release, err)
		}
	}
	say("kernel %s ready in %s", release, dest)
	return dest, nil
}

// kernelPackages returns the packages of release to unpack, pinned to apt's
// candidate versions: the image first, then the headers and the headers'
// linux-headers-* and linux-kbuild-* dependencies.
func (a *Archive) kernelPackages(ctx context.Context, release string) ([]debPackage, error) {
	if err := a.Update(ctx, false); err != nil {
		return nil, err
	}
	image, headers := "linux-image-"+release, "linux-headers-"+release
	cand, err := a.candidates(ctx, image+"-unsigned", image, headers)
	if err != nil {
		return nil, err
	}
	var pkgs []debPackage
	switch {
	case cand[image+"-unsigned"] != "":
		// The signed image package is a package around the unsigned one.
		pkgs = append(pkgs, debPackage{image + "-unsigned", cand[image+"-unsigned"]})
	case cand[image] != "":
		pkgs = append(pkgs, debPackage{image, cand[image]})
	default:
		avail, err := a.Search(ctx, cloudKernels)
		if err != nil {
			return nil, fmt.Errorf("kernel %s is not in the apt archive (suite %s), and the archive cannot list its kernels: %w", release, a.Suite, err)
		}
		e := &KernelNotFoundError{Release: release, Suite: a.Suite}
		for _, name := range avail {
			rel := strings.TrimPrefix(name, "linux-image-")
			if version, _, _ := strings.Cut(rel, "-"); strings.Count(version, ".") < 2 {
				continue // a metapackage (linux-image-6.12-cloud-amd64)
			}
			e.Available = append(e.Available, rel)
		}
		slices.SortFunc(e.Available, versort.Compare)
		return nil, e
	}
	if cand[headers] == "" {
		return nil, fmt.Errorf("kernel %s: suite %s has its image but no package %s", release, a.Suite, headers)
	}
	pkgs = append(pkgs, debPackage{headers, cand[headers]})
	deps, err := a.depends(ctx, headers)
	if err != nil {
		return nil, fmt.Errorf("kernel %s: %w", release, err)
	}
	var names []string
	for _, d := range deps {
		if strings.HasPrefix(d, "linux-headers-") || strings.HasPrefix(d, "linux-kbuild-") {
			names = append(names, d)
		}
	}
	if len(names) == 0 {
		return pkgs, nil
	}
	if cand, err = a.candidates(ctx, names...); err != nil {
		return nil, err
	}
	for _, n := range names {
		if cand[n] == "" {
			return nil, fmt.Errorf("kernel %s: %s depends on %s, which suite %s does not have", release, headers, n, a.Suite)
		}
		pkgs = append(pkgs, debPackage{n, cand[n]})
	}
	return pkgs, nil
}

// finishKernel makes the unpacked tree at dir look as an installed kernel
// does: modules under lib/modules/<release> (merged-/usr packages ship them
// under usr/lib/modules), a boot/vmlinuz-<release>, and depmod's indexes.
func finishKernel(ctx context.Context, run runner.Runner, dir, release, image string) error {
	mods := filepath.Join(dir, "lib", "modules", release)
	if _, err := os.Stat(mods); err != nil {
		usrMods := filepath.Join(dir, "usr", "lib", "modules", release)
		if _, err := os.Stat(usrMods); err == nil {
			if err := os.MkdirAll(filepath.Dir(mods), 0o755); err != nil {
				return fmt.Errorf("kernel %s: %w", release, err)
			}
			if err := os.Rename(usrMods, mods); err != nil {
				return fmt.Errorf("kernel %s: %w", release, err)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "boot", "vmlinuz-"+release)); err != nil {
		return fmt.Errorf("kernel %s: no boot/vmlinuz-%s in %s", release, release, image)
	}
	if _, err := os.Stat(filepath.Join(mods, "modules.dep")); err == nil {
		return nil
	}
	if _, err := run.Run(ctx, runner.Cmd{Name: "depmod", Args: []string{"-b", dir, release}}); err != nil {
		err, words := ended(err)
		return fmt.Errorf("kernel %s: depmod -b %s %s: %w%s", release, dir, release, err, words)
	}
	return nil
}

// candidates returns apt's candidate version of each name (apt-cache
// policy), leaving out names the suite does not have.
func (a *Archive) candidates(ctx context.Context, names ...string) (map[string]string, error) {
	out, err := a.aptCache(ctx, append([]string{"policy"}, names...)...)
	if err != nil {
		return nil, err
	}
	got := parsePolicy(out)
	for n := range got {
		if !slices.Contains(names, n) {
			delete(got, n)
		}
	}
	return got, nil
}

// parsePolicy reads "apt-cache policy" output ("name:" lines, each followed
// by indented fields) and returns each package's candidate version, leaving
// out those without one ("(none)").
func parsePolicy(out []byte) map[string]string {
	got := map[string]string{}
	name := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if line != "" && line[0] != ' ' && strings.HasSuffix(line, ":") {
			name = strings.TrimSuffix(line, ":")
			continue
		}
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "Candidate:")
		if !ok || name == "" {
			continue
		}
		if v = strings.TrimSpace(v); v != "" && v != "(none)" {
			got[name] = v
		}
	}
	return got
}

// depends returns the packages name depends on (apt-cache depends: its
// Depends and PreDepends, alternatives included, virtual ones left out).
func (a *Archive) depends(ctx context.Context, name string) ([]string, error) {
	out, err := a.aptCache(ctx, "depends", name)
	if err != nil {
		return nil, err
	}
	return parseDepends(out), nil
}

// parseDepends reads "apt-cache depends" output and returns the names on
// its Depends and PreDepends lines, in order, once each.
func parseDepends(out []byte) []string {
	var deps []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || !strings.HasSuffix(f[0], "Depends:") || strings.HasPrefix(f[1], "<") {
			continue
		}
		if !slices.Contains(deps, f[1]) {
			deps = append(deps, f[1])
		}
	}
	return deps
}

// digitRun returns how many ASCII digits s begins with.
func digitRun(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}
