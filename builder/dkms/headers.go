package dkms

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/kpreload/kpreload/internal/inroot"
)

// Headers describes a kernel headers tree: the directory dkms calls the
// kernel source dir (/lib/modules/<kver>/build on an installed system), here
// usually unpacked with dpkg -x as <root>/usr/src/linux-headers-<kver>.
type Headers struct {
	// Dir is the headers directory, absolute.
	Dir string
	// Root is the unpacked root Dir lives in (Dir is Root/usr/src/<name>),
	// or "" when Dir is not laid out that way.
	Root string
	// Release is the kernel release the headers are for (UTS_RELEASE).
	Release string
	// CCVersionText is CONFIG_CC_VERSION_TEXT: the compiler the kernel was built with.
	CCVersionText string
	// CC is the compiler command to build modules with: the first word of
	// CCVersionText for a gcc-built kernel ("gcc-12",
	// "x86_64-linux-gnu-gcc-12"), "" for other compilers.
	CC string
	// BTFModules is true when kbuild will generate BTF for modules
	// (CONFIG_DEBUG_INFO_BTF_MODULES=y and a vmlinux in Dir), which needs pahole.
	BTFModules bool
	// Includes maps each absolute path the top Makefile includes to the file
	// that will be used: inside Root when it exists there, else the path itself.
	Includes map[string]string
	// Config is the kernel's configuration (.config), CONFIG_ names to values.
	Config map[string]string
}

// needsShadow reports whether the Makefile includes a file by an absolute
// path that only exists inside Root, so make must not read Dir/Makefile as is.
func (h *Headers) needsShadow() bool {
	for from, to := range h.Includes {
		if from != to {
			return true
		}
	}
	return false
}

var utsReleaseRE = regexp.MustCompile(`(?m)^#define UTS_RELEASE "([^"]*)"`)

// includeRE matches a make include directive and captures its file list.
var includeRE = regexp.MustCompile(`^\s*-?include\s+(.+?)\s*$`)

// InspectHeaders reads what Build needs to know about a headers tree and
// checks that the tree is complete: kbuild's scripts (symlinked into
// linux-kbuild-* by Debian) resolve, and every absolute include of the top
// Makefile exists inside the unpacked root or on this system.
func InspectHeaders(dir string) (*Headers, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("inspect kernel headers %s: %w", dir, err)
	}
	h := &Headers{Dir: abs, Includes: map[string]string{}}
	if usrSrc := filepath.Dir(abs); filepath.Base(usrSrc) == "src" && filepath.Base(filepath.Dir(usrSrc)) == "usr" {
		h.Root = filepath.Dir(filepath.Dir(usrSrc))
	}

	uts, err := inroot.ReadPath(filepath.Join(abs, "include/generated/utsrelease.h"), inroot.MaxText)
	if err != nil {
		return nil, fmt.Errorf("inspect kernel headers %s: not a prepared kernel headers tree: %w", abs, err)
	}
	m := utsReleaseRE.FindSubmatch(uts)
	if m == nil {
		return nil, fmt.Errorf("inspect kernel headers %s: no UTS_RELEASE in include/generated/utsrelease.h", abs)
	}
	h.Release = string(m[1])

	config, err := readKconfig(filepath.Join(abs, ".config"))
	if err != nil {
		return nil, fmt.Errorf("inspect kernel headers %s: %w", abs, err)
	}
	h.Config = config
	h.CCVersionText = config["CONFIG_CC_VERSION_TEXT"]
	if config["CONFIG_CC_IS_GCC"] == "y" {
		if f := strings.Fields(h.CCVersionText); len(f) > 0 {
			h.CC = f[0]
		}
	}
	if config["CONFIG_DEBUG_INFO_BTF_MODULES"] == "y" {
		if _, err := os.Stat(filepath.Join(abs, "vmlinux")); err == nil {
			h.BTFModules = true
		}
	}

	for _, rel := range []string{"scripts/basic/fixdep", "scripts/mod/modpost", "Module.symvers"} {
		if _, err := os.Stat(filepath.Join(abs, rel)); err != nil {
			return nil, fmt.Errorf("inspect kernel headers %s: incomplete tree (is linux-kbuild unpacked next to it?): %w", abs, err)
		}
	}

	if err := h.readIncludes(); err != nil {
		return nil, fmt.Errorf("inspect kernel headers %s: %w", abs, err)
	}
	return h, nil
}

// readIncludes fills h.Includes from the top Makefile. Debian's per-flavour
// headers Makefile is a single "include /usr/src/linux-headers-<x>-common/Makefile".
func (h *Headers) readIncludes() error {
	f, err := inroot.OpenPath(filepath.Join(h.Dir, "Makefile"))
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := includeRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		for _, p := range strings.Fields(m[1]) {
			if !filepath.IsAbs(p) || strings.ContainsAny(p, "$*?[") {
				continue
			}
			switch {
			case h.Root != "" && exists(filepath.Join(h.Root, p)):
				h.Includes[p] = filepath.Join(h.Root, p)
			case exists(p):
				h.Includes[p] = p
			default:
				where := "on this system"
				if h.Root != "" {
					where = "in " + h.Root + " or on this system"
				}
				return fmt.Errorf("Makefile includes %s, which is not %s (is the -common headers package unpacked?)", p, where)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read Makefile: %w", err)
	}
	return nil
}

// shadow makes a kernel build directory at dst that make can use in place of
// h.Dir inside the build's sandbox, where the unpacked kernel kroot (h.Root,
// or h.Dir itself) is mounted at SandboxKernel: every entry of h.Dir is
// symlinked by its absolute sandbox path (so relative links inside the
// unpacked tree keep resolving), and the Makefile is rewritten to include the
// unpacked files instead of /usr/src/... paths. make takes the object tree
// from the directory it runs in and the source tree from the included
// Makefile's own location, so both stay correct, and both are the same
// paths on every host.
func (h *Headers) shadow(dst, kroot string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("make kernel build dir: %w", err)
	}
	dir, err := inKernel(kroot, h.Dir)
	if err != nil {
		return fmt.Errorf("make kernel build dir: %w", err)
	}
	entries, err := os.ReadDir(h.Dir)
	if err != nil {
		return fmt.Errorf("make kernel build dir: %w", err)
	}
	for _, e := range entries {
		if e.Name() == "Makefile" {
			continue
		}
		if err := os.Symlink(filepath.Join(dir, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return fmt.Errorf("make kernel build dir: %w", err)
		}
	}
	mk, err := inroot.ReadPath(filepath.Join(h.Dir, "Makefile"), inroot.MaxLarge)
	if err != nil {
		return fmt.Errorf("make kernel build dir: %w", err)
	}
	var out strings.Builder
	for line := range strings.Lines(string(mk)) {
		if m := includeRE.FindStringSubmatch(strings.TrimRight(line, "\n")); m != nil {
			for from, to := range h.Includes {
				if from == to {
					continue
				}
				in, err := inKernel(kroot, to)
				if err != nil {
					return fmt.Errorf("make kernel build dir: %w", err)
				}
				line = replaceWord(line, from, in)
			}
		}
		out.WriteString(line)
	}
	if err := os.WriteFile(filepath.Join(dst, "Makefile"), []byte(out.String()), 0o644); err != nil {
		return fmt.Errorf("make kernel build dir: %w", err)
	}
	return nil
}

// replaceWord replaces whole blank-separated occurrences of word in line.
func replaceWord(line, word, with string) string {
	re := regexp.MustCompile(`(^|[ \t])` + regexp.QuoteMeta(word) + `([ \t\r\n]|$)`)
	return re.ReplaceAllStringFunc(line, func(s string) string {
		return strings.Replace(s, word, with, 1)
	})
}

// readKconfig reads a kernel .config into a map; quoted values are unquoted.
func readKconfig(path string) (map[string]string, error) {
	data, err := inroot.ReadPath(path, inroot.MaxLarge)
	if err != nil {
		return nil, fmt.Errorf("read kernel config: %w", err)
	}
	config := map[string]string{}
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = strings.ReplaceAll(strings.ReplaceAll(v[1:len(v)-1], `\"`, `"`), `\\`, `\`)
		}
		config[k] = v
	}
	return config, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
