package manifest

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/kpreload/kpreload/kmodcache/fsverity"
	"github.com/kpreload/kpreload/kmodcache/modinfo"
	"github.com/kpreload/kpreload/kmodcache/modname"
	"github.com/kpreload/kpreload/kmodcache/modorder"
	"github.com/kpreload/kpreload/kmodcache/names"
)

// maxModuleName is the longest module name the kernel accepts
// (MODULE_NAME_LEN is 64 - sizeof(unsigned long), NUL included).
const maxModuleName = 55

// ValidationError lists everything wrong with a manifest.
type ValidationError struct {
	// Set names the manifest ("nvidia 535.261.03 open for 6.1.0-56-cloud-amd64").
	Set string
	// Problems holds one sentence per problem, in a stable order.
	Problems []string
}

// Error joins the problems into one message.
func (e *ValidationError) Error() string {
	return fmt.Sprintf("invalid manifest %s: %s", e.Set, strings.Join(e.Problems, "; "))
}

// compressions are the Compression values a module may carry.
var compressions = []string{"", "xz", "zstd", "gzip"}

// sigKeyRE is a sig_key as modinfo prints it.
var sigKeyRE = regexp.MustCompile(`^[0-9A-F]{2}(:[0-9A-F]{2})*$`)

// Validate checks that the manifest describes a loadable set: format, kernel
// and driver present and well formed, every module's vermagic equal to the
// set's and naming the set's kernel, module names and files unique, digests
// well formed, every dependency either in the set or listed in External, no
// dependency cycle, every requested firmware listed, a supported-gpus file
// (if any) well described. It returns a
// *ValidationError listing every problem, or nil.
func (m *Manifest) Validate() error {
	var p []string
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	// Driver, version, flavour and kernel name directories and files
	// wherever the set goes: names.Check keeps them single path elements.
	addName := func(field, v string) {
		if err := names.Check(field, v); err != nil {
			p = append(p, err.Error())
		}
	}

	if m.Format != FormatVersion {
		add("format %d, want %d", m.Format, FormatVersion)
	}
	switch {
	case m.Kernel == "":
		add("kernel release is empty")
	default:
		addName("kernel release", m.Kernel)
	}
	if r := modinfo.VermagicRelease(m.Vermagic); r == "" {
		add("vermagic is empty")
	} else if r != m.Kernel {
		add("vermagic %q is for kernel %q, set is for %q", m.Vermagic, r, m.Kernel)
	}
	if strings.TrimSpace(m.Driver) == "" {
		add("driver name is empty")
	} else {
		addName("driver name", m.Driver)
	}
	if strings.TrimSpace(m.Version) == "" {
		add("driver version is empty")
	} else {
		addName("driver version", m.Version)
	}
	if m.Flavor != "" {
		addName("flavor", m.Flavor)
	}
	if len(m.Modules) == 0 {
		add("no modules")
	}

	names := map[string]int{}
	files := map[string]bool{}
	for i, mod := range m.Modules {
		label := mod.Name
		if label == "" {
			label = fmt.Sprintf("#%d", i)
		}
		switch {
		case mod.Name == "":
			add("module #%d (%s) has no name", i, mod.File)
		case !validModuleName(mod.Name):
			add("module name %q is not a kernel module name ([A-Za-z0-9_-], at most %d characters)", mod.Name, maxModuleName)
		}
		if n := modname.Normalize(mod.Name); mod.Name != "" {
			if _, dup := names[n]; dup {
				add("module %s appears more than once", mod.Name)
			}
			names[n] = i
		}
		switch {
		case mod.File == "":
			add("module %s has no file name", label)
		case mod.File == "." || mod.File == ".." || strings.ContainsAny(mod.File, "/\\\x00") || strings.HasPrefix(mod.File, "."):
			add("module %s file name %q is not a plain file name", label, mod.File)
		case files[mod.File]:
			add("file %s appears more than once", mod.File)
		}
		files[mod.File] = true
		if !IsDigest(mod.SHA256) {
			add("module %s sha256 %q is not 64 lowercase hex digits", label, mod.SHA256)
		}
		if mod.Size <= 0 {
			add("module %s size %d is not positive", label, mod.Size)
		}
		if mod.Verity != "" && !fsverity.Valid(mod.Verity) {
			add("module %s verity %q is not \"sha256:\" and 64 lowercase hex digits", label, mod.Verity)
		}
		if mod.ELFSize <= 0 {
			add("module %s ELF size %d is not positive", label, mod.ELFSize)
		}
		if !mod.Signed && (mod.Signer != "" || mod.SigKey != "") {
			add("module %s is unsigned but names a signer (%q, %q)", label, mod.Signer, mod.SigKey)
		}
		if mod.SigKey != "" && !sigKeyRE.MatchString(mod.SigKey) {
			add("module %s sig_key %q is not upper-case hex pairs joined by ':'", label, mod.SigKey)
		}
		if !slices.Contains(compressions, mod.Compression) {
			add("module %s compression %q is not one of \"\", xz, zstd, gzip", label, mod.Compression)
		}
		if mod.Vermagic != m.Vermagic {
			kernel := modinfo.VermagicRelease(mod.Vermagic)
			if kernel == "" {
				kernel = "(none)"
			}
			add("module %s has vermagic %q (kernel %s), set has %q", label, mod.Vermagic, kernel, m.Vermagic)
		}
		for _, fw := range mod.Firmware {
			if !slices.Contains(m.Firmware, fw) {
				add("module %s requests firmware %s, which the set's firmware list lacks", label, fw)
			}
		}
	}

	external := map[string]bool{}
	for _, e := range m.External {
		n := modname.Normalize(e)
		external[n] = true
		if _, in := names[n]; in {
			add("module %s is listed as external but is part of the set", e)
		}
	}
	for _, mod := range m.Modules {
		for _, d := range mod.Depends {
			n := modname.Normalize(d)
			if _, in := names[n]; !in && !external[n] {
				add("module %s depends on %s, which is neither in the set nor listed as external", mod.Name, d)
			}
		}
	}
	if cyc := m.dependencyCycle(); cyc != nil {
		add("dependency cycle: %s", strings.Join(cyc, " -> "))
	}
	if f := m.SupportedGPUs; f != nil {
		switch {
		case f.File != SupportedGPUsFile:
			add("supported-gpus file name %q, want %q", f.File, SupportedGPUsFile)
		case files[f.File]:
			add("supported-gpus file %s has the name of a module file", f.File)
		}
		if !IsDigest(f.SHA256) {
			add("supported-gpus sha256 %q is not 64 lowercase hex digits", f.SHA256)
		}
		if f.Size <= 0 {
			add("supported-gpus size %d is not positive", f.Size)
		}
	}
	if len(p) == 0 {
		return nil
	}
	return &ValidationError{Set: m.label(), Problems: p}
}

// label names the set in messages.
func (m *Manifest) label() string {
	s := strings.TrimSpace(strings.Join([]string{m.Driver, m.Version, m.Flavor}, " "))
	if s == "" {
		s = "(unnamed)"
	}
	if m.Kernel != "" {
		s += " for " + m.Kernel
	}
	return s
}

// dependencyCycle returns one cycle among the set's own modules (first module
// repeated at the end), or nil: the first modorder.Walk meets.
func (m *Manifest) dependencyCycle() []string {
	deps := map[string][]string{}
	var names []string
	for _, mod := range m.Modules {
		n := modname.Normalize(mod.Name)
		names = append(names, n)
		for _, d := range mod.Depends {
			if d = modname.Normalize(d); m.has(d) {
				deps[n] = append(deps[n], d) // a dependency outside the set is in no cycle of it
			}
		}
	}
	var cycle []string
	modorder.Walk(names, func(n string) []string { return deps[n] }, func(_, _ string, path []string) {
		if cycle == nil {
			cycle = path
		}
	})
	return cycle
}

// has reports whether the set holds a module of that (normalized) name.
func (m *Manifest) has(name string) bool {
	for _, mod := range m.Modules {
		if modname.Normalize(mod.Name) == name {
			return true
		}
	}
	return false
}

// IsDigest reports whether s is a SHA-256 digest in lowercase hex.
func IsDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// validModuleName reports whether n is a kernel module name.
func validModuleName(n string) bool {
	if n == "" || len(n) > maxModuleName {
		return false
	}
	for _, c := range n {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
