package store

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/kpreload/kpreload/kmodcache/fsverity"
	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/modinfo"
)

// checkDerived re-reads every module file of m (opened by open) and checks
// that the manifest says of each module, and of the whole set, exactly what
// the files say of themselves: name, vermagic, srcversion, version,
// aliases, dependencies, softdeps, declared firmware, signature state,
// compression, ELF size and, where m records one, the fs-verity digest;
// the set's kernel, vermagic, external dependencies and firmware. Only what no module file can say (driver,
// version, flavor, cache key, the supported-GPU list, and each file's
// digest, which the object store verifies) is taken from m. A set.json from
// a registry therefore cannot make /init load a module for devices the
// module does not claim, or claim a srcversion or signature it lacks.
func checkDerived(m *manifest.Manifest, open func(manifest.Module) (*os.File, error)) error {
	mods := make([]manifest.Module, 0, len(m.Modules))
	for _, mod := range m.Modules {
		f, err := open(mod)
		if err != nil {
			return fmt.Errorf("module %s: %w", mod.File, err)
		}
		info, err := modinfo.ReadFrom(f)
		var verity string
		if err == nil && mod.Verity != "" {
			verity, err = fileVerity(f)
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("module %s: %w", mod.File, err)
		}
		d := manifest.ModuleFromInfo(info, mod.File, mod.SHA256, mod.Size)
		d.Verity = verity
		mods = append(mods, d)
	}
	want, err := manifest.Build(m.Driver, m.Version, m.Flavor, mods, m.CacheKey)
	if err != nil {
		return fmt.Errorf("the module files themselves: %w", err)
	}
	want.SupportedGPUs = m.SupportedGPUs
	got := m.Clone()
	got.Canonicalize()
	a, errA := manifest.Marshal(want)
	b, errB := manifest.Marshal(got)
	if errA == nil && errB == nil && bytes.Equal(a, b) {
		return nil
	}
	if d := derivedDiff(got, want); d != "" {
		return fmt.Errorf("set.json does not say what its modules say: %s", d)
	}
	return fmt.Errorf("set.json does not say what its modules say")
}

// fileVerity is the fs-verity digest of all of f, read from its start.
func fileVerity(f *os.File) (string, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", fmt.Errorf("fs-verity digest: %w", err)
	}
	return fsverity.Digest(f)
}

// derivedDiff names the fields in which manifest got differs from want,
// the manifest its module files give.
func derivedDiff(got, want *manifest.Manifest) string {
	var d []string
	field := func(what string, g, w any) {
		if fmt.Sprint(g) != fmt.Sprint(w) {
			d = append(d, fmt.Sprintf("%s is %q in set.json, %q in the module", what, fmt.Sprint(g), fmt.Sprint(w)))
		}
	}
	field("kernel", got.Kernel, want.Kernel)
	field("vermagic", got.Vermagic, want.Vermagic)
	field("external dependencies", got.External, want.External)
	field("firmware", got.Firmware, want.Firmware)
	if len(got.Modules) != len(want.Modules) {
		d = append(d, fmt.Sprintf("%d modules in set.json, %d files", len(got.Modules), len(want.Modules)))
	}
	for i := range min(len(got.Modules), len(want.Modules)) {
		g, w := got.Modules[i], want.Modules[i]
		p := "module " + w.File + ": "
		field(p+"name", g.Name, w.Name)
		field(p+"vermagic", g.Vermagic, w.Vermagic)
		field(p+"srcversion", g.Srcversion, w.Srcversion)
		field(p+"version", g.Version, w.Version)
		field(p+"aliases", g.Aliases, w.Aliases)
		field(p+"depends", g.Depends, w.Depends)
		field(p+"softdeps", g.Softdeps, w.Softdeps)
		field(p+"firmware", g.Firmware, w.Firmware)
		field(p+"signed", g.Signed, w.Signed)
		field(p+"signer", g.Signer, w.Signer)
		field(p+"sig_key", g.SigKey, w.SigKey)
		field(p+"compression", g.Compression, w.Compression)
		field(p+"elf_size", g.ELFSize, w.ELFSize)
		field(p+"verity", g.Verity, w.Verity)
	}
	return strings.Join(slices.Compact(d), "; ")
}
