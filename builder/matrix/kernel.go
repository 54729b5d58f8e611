package matrix

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/builder/buildroot"
	"github.com/kpreload/kpreload/builder/dkms"
	toolrun "github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/internal/none"
)

// kernel is one kernel of the matrix, unpacked and inspected.
type kernel struct {
	// headersDir is <root>/usr/src/linux-headers-<release>.
	headersDir string
	// headers is what dkms.InspectHeaders read from headersDir.
	headers *dkms.Headers
	// sourceDir is the kernel source tree the headers' build directory was
	// made from (Debian's linux-headers-<x>-common, named by the
	// lib/modules/<release>/source link), inside the unpacked root; "" when
	// there is no such link.
	sourceDir string
	// modulesTree is <root>/lib/modules/<release> when it has modules.dep
	// (for the store's dependency check), else "".
	modulesTree string
	// symvers and config are the SHA-256 of Module.symvers and .config.
	symvers, config string
	// headersPackage is the Version of the linux-headers .deb, or "unknown".
	headersPackage string
	// compiler is the first line of "$CC --version" for the kernel's own
	// compiler, or "" when the kernel was not built with gcc; for a build
	// root, prefixed with its suite.
	compiler string
	// dkms is "dkms --version" of the dkms that builds for this kernel (the
	// host's, or the build root's prefixed with its suite).
	dkms string
	// root is the build root of the kernel's suite, or nil to build on the host.
	root *buildroot.Root
	// dir is the unpacked kernel (<downloads>/kernels/<release>).
	dir string
	// compression is how its cells store modules (ModuleCompression).
	compression string
}

// prepareKernel makes sure kernel release is unpacked under
// downloads/kernels/<release> (fetching it from arc, the archive of its
// suite, when it is not) and reads what the cache key needs from its headers,
// running dpkg-deb and the compiler through run (nil: runner.Default).
func prepareKernel(ctx context.Context, run toolrun.Runner, release string, arc *archive.Archive, downloads string, root *buildroot.Root, driver dkms.Driver) (*kernel, error) {
	kroot, err := arc.FetchKernel(ctx, release, downloads, nil)
	if err != nil {
		return nil, err // names the kernel
	}
	k := &kernel{headersDir: filepath.Join(kroot, "usr", "src", "linux-headers-"+release), dir: kroot}
	h, err := dkms.InspectHeaders(k.headersDir)
	if err != nil {
		return nil, fmt.Errorf("kernel %s: %w", release, err)
	}
	if h.Release != release {
		return nil, fmt.Errorf("kernel %s: headers %s are for kernel %s", release, k.headersDir, h.Release)
	}
	k.headers = h
	k.compression = ModuleCompression(h.Config)
	if k.symvers, err = fileDigest(filepath.Join(k.headersDir, "Module.symvers")); err != nil {
		return nil, fmt.Errorf("kernel %s: %w", release, err)
	}
	if k.config, err = fileDigest(filepath.Join(k.headersDir, ".config")); err != nil {
		return nil, fmt.Errorf("kernel %s: %w", release, err)
	}
	tree := filepath.Join(kroot, "lib", "modules", release)
	if exists(filepath.Join(tree, "modules.dep")) {
		k.modulesTree = tree
	}
	if target, err := os.Readlink(filepath.Join(tree, "source")); err == nil {
		// Bookworm's link is absolute (/usr/src/linux-headers-<x>-common);
		// trixie's is relative to /usr/lib/modules/<release>
		// (../../../src/...), where merged-/usr puts the modules and from
		// where archive.FetchKernel moved them to lib/modules.
		bases := []string{""}
		if !filepath.IsAbs(target) {
			bases = []string{filepath.Join("/lib/modules", release), filepath.Join("/usr/lib/modules", release)}
		}
		for _, base := range bases {
			if dir := filepath.Join(kroot, base, target); exists(filepath.Join(dir, "Makefile")) {
				k.sourceDir = dir
				break
			}
		}
	}
	if k.headersPackage, err = headersPackageVersion(ctx, run, filepath.Join(downloads, "debs"), release); err != nil {
		return nil, err
	}
	k.root = root
	if k.dkms, err = driver.Version(ctx, root); err != nil {
		return nil, fmt.Errorf("kernel %s: %w", release, err)
	}
	if h.CC != "" && root != nil {
		out, err := root.Output(ctx, h.CC, "--version")
		if err != nil {
			return nil, fmt.Errorf("kernel %s (built with %q): %w", release, h.CCVersionText, err)
		}
		first, _, _ := bytes.Cut(out, []byte("\n"))
		k.compiler = root.Suite + " build root: " + strings.TrimSpace(string(first))
	} else if h.CC != "" {
		if k.compiler, err = compilerVersion(ctx, run, h.CC); err != nil {
			return nil, fmt.Errorf("kernel %s (built with %q): %w", release, h.CCVersionText, err)
		}
	}
	return k, nil
}

// headersPackageVersion returns the Version field of the linux-headers .deb
// of release in debs (the newest if several), or "unknown" when there is none.
// dpkg-deb runs through run (nil: runner.Default).
func headersPackageVersion(ctx context.Context, run toolrun.Runner, debs, release string) (string, error) {
	found, _ := filepath.Glob(filepath.Join(debs, "linux-headers-"+release+"_*.deb"))
	var versions []string
	for _, deb := range found {
		out, err := toolrun.Or(run).Run(ctx, toolrun.Cmd{Name: "dpkg-deb", Args: []string{"-f", deb, "Version"}})
		if err != nil {
			return "", fmt.Errorf("kernel %s: headers package version: %w", release, err)
		}
		versions = append(versions, strings.TrimSpace(string(out)))
	}
	if len(versions) == 0 {
		return "unknown", nil
	}
	slices.SortFunc(versions, recipe.CompareVersions)
	return versions[len(versions)-1], nil
}

// compilerVersion returns the first line of "cc --version", run through run
// (nil: runner.Default).
func compilerVersion(ctx context.Context, run toolrun.Runner, cc string) (string, error) {
	run = toolrun.Or(run)
	if _, err := run.LookPath(cc); err != nil {
		return "", fmt.Errorf("compiler %s is not installed (run scripts/deps.sh): %w", cc, err)
	}
	out, err := run.Run(ctx, toolrun.Cmd{Name: cc, Args: []string{"--version"}})
	if err != nil {
		return "", fmt.Errorf("compiler version: %w", err)
	}
	first, _, _ := bytes.Cut(out, []byte("\n"))
	return strings.TrimSpace(string(first)), nil
}

// exists reports whether path exists.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// ErrUnknownKernel is wrapped by Run's error when a requested kernel is
// neither unpacked nor offered by the archive.
var ErrUnknownKernel = errors.New("unknown kernel")

// checkKernels makes sure every kernel of cells is either unpacked under
// downloads/kernels or offered by the archive (lister), so a typo fails the
// whole request at once, naming the kernels there are, instead of failing
// every cell with a download error.
func checkKernels(cells []Cell, downloads string, lister recipe.KernelLister, suites map[string]string) error {
	var missing []string
	for _, c := range cells {
		if slices.Contains(missing, c.Kernel) {
			continue
		}
		if archive.KernelUnpacked(downloads, c.Kernel) {
			continue
		}
		missing = append(missing, c.Kernel)
	}
	if len(missing) == 0 {
		return nil
	}
	var (
		unknown []string
		avail   []string
	)
	for _, k := range missing {
		l := lister
		if s := suites[k]; s != "" && s != archive.DefaultSuite {
			sl, ok := lister.(recipe.SuiteLister)
			if !ok {
				return fmt.Errorf("kernel %s is in suite %s, which this lister cannot read", k, s)
			}
			var err error
			if l, err = sl.InSuite(s); err != nil {
				return err
			}
		}
		a, err := l.Available()
		if err != nil {
			return fmt.Errorf("kernels %s are not unpacked in %s, and the archive cannot be asked: %w", strings.Join(missing, ", "), filepath.Join(downloads, "kernels"), err)
		}
		if !slices.Contains(a, k) {
			unknown = append(unknown, k)
			avail = a
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	return fmt.Errorf("%w %s: not unpacked in %s and not in the apt archive; available: %s", ErrUnknownKernel, strings.Join(unknown, ", "), filepath.Join(downloads, "kernels"), describeAvailable(unknown[0], avail, unpacked(downloads)))
}

// unpacked lists the kernels unpacked under downloads/kernels.
func unpacked(downloads string) []string {
	ents, _ := os.ReadDir(filepath.Join(downloads, "kernels"))
	var out []string
	for _, e := range ents {
		if archive.KernelUnpacked(downloads, e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// describeAvailable names the kernels one could have meant: the unpacked
// ones, then the archive's of the same flavour as want (the part after the
// ABI number, such as "cloud-amd64"), or all of them when none share it.
func describeAvailable(want string, archive, local []string) string {
	flavor := kernelFlavor(want)
	var same []string
	for _, k := range archive {
		if flavor != "" && kernelFlavor(k) == flavor {
			same = append(same, k)
		}
	}
	what := "archive"
	if len(same) == 0 {
		same = archive
	} else {
		what = "archive, " + flavor
	}
	s := fmt.Sprintf("unpacked: %s; %s: %s", none.List(local), what, none.List(same))
	return s
}

// kernelFlavor returns the flavour of a Debian kernel release: what follows
// the ABI part ("6.1.0-56-cloud-amd64" -> "cloud-amd64",
// "6.12.117+deb12-cloud-amd64" -> "cloud-amd64").
func kernelFlavor(release string) string {
	parts := strings.Split(release, "-")
	for i, p := range parts {
		if i > 0 && p != "" && (p[0] < '0' || p[0] > '9') {
			return strings.Join(parts[i:], "-")
		}
	}
	return ""
}
