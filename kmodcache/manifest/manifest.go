// Package manifest describes one module set of the cache: the kernel modules of
// one driver version built for one kernel release, with the digest, vermagic,
// aliases and dependencies of every module. A manifest's canonical JSON is
// deterministic (no wall-clock time, sorted lists), so its SHA-256 is the set's
// identity.
package manifest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/kpreload/kpreload/kmodcache/modinfo"
	"github.com/kpreload/kpreload/kmodcache/modname"
	"github.com/kpreload/kpreload/kmodcache/modsig"
)

// FormatVersion is the manifest format this package writes; Unmarshal refuses others.
const FormatVersion = 1

// Manifest lists the modules of one set and what they were built from.
type Manifest struct {
	Format int `json:"format"`
	// Kernel is the kernel release (uname -r) every module was built for: the
	// first word of Vermagic.
	Kernel string `json:"kernel"`
	// Vermagic is the vermagic string every module of the set carries.
	Vermagic string `json:"vermagic"`
	// Driver, Version and Flavor name the driver ("nvidia", "535.261.03", "open").
	Driver  string `json:"driver"`
	Version string `json:"version"`
	Flavor  string `json:"flavor,omitempty"`
	// Modules are the set's module files, sorted by name.
	Modules []Module `json:"modules"`
	// External lists the modules some module depends on that are not part of the
	// set: the kernel's own modules (or built-ins), sorted.
	External []string `json:"external,omitempty"`
	// Firmware is the sorted union of the firmware files the modules request.
	Firmware []string `json:"firmware,omitempty"`
	// CacheKey holds the build inputs (source digest, headers version,
	// compiler, ...) the build pipeline looks the set up by; free-form.
	CacheKey map[string]string `json:"cache_key,omitempty"`
	// SupportedGPUs is the driver's supported-gpus.json (NVIDIA's format,
	// verbatim and uncompressed) stored with the set; nil when the driver
	// ships none.
	SupportedGPUs *File `json:"supported_gpus,omitempty"`
}

// SupportedGPUsFile is the File name a set's supported-gpus.json has.
const SupportedGPUsFile = "supported-gpus.json"

// File is a data file stored with a set (not a module).
type File struct {
	// File is the file's name inside the set, such as "supported-gpus.json".
	File string `json:"file"`
	// SHA256 is the hex digest of the file's bytes.
	SHA256 string `json:"sha256"`
	// Size is the file's size in bytes.
	Size int64 `json:"size"`
}

// Module is one module file of a set.
type Module struct {
	// Name is the module name (modinfo name=, underscores).
	Name string `json:"name"`
	// File is the module's file name inside the set ("nvidia.ko", "nvidia.ko.xz").
	File string `json:"file"`
	// SHA256 is the hex digest of the file as stored (compressed if Compression is set).
	SHA256 string `json:"sha256"`
	// Size is the size of the file as stored, in bytes.
	Size int64 `json:"size"`
	// Verity is the fs-verity digest of the file as stored
	// (kmodcache/fsverity: "sha256:" and hex, 4096-byte blocks, no salt):
	// what the kernel measures of the file once fs-verity is on, so /init
	// can trust it without reading it. Empty in sets made before it was
	// recorded; covered by the set id, hence by the cell's signature.
	Verity string `json:"verity,omitempty"`
	// ELFSize is the size of the uncompressed ELF image, in bytes.
	ELFSize     int64  `json:"elf_size"`
	Compression string `json:"compression,omitempty"`
	Vermagic    string `json:"vermagic"`
	Srcversion  string `json:"srcversion,omitempty"`
	Version     string `json:"version,omitempty"`
	// Aliases are the modalias patterns the module matches, sorted.
	Aliases []string `json:"aliases,omitempty"`
	// Depends lists the modules this one needs (modinfo depends=), sorted.
	Depends []string `json:"depends,omitempty"`
	// Softdeps holds each modinfo softdep= value verbatim, in file order.
	Softdeps []string `json:"softdeps,omitempty"`
	// Firmware lists the firmware files the module requests, sorted.
	Firmware []string `json:"firmware,omitempty"`
	// Signed reports whether a module signature is appended to the ELF image.
	Signed bool `json:"signed"`
	// Signer and SigKey name the certificate a PKCS#7 signature was made
	// with, as kmod's modinfo prints them (signer, sig_key): the issuer's
	// common name and the serial number (or the subject key identifier).
	// A boot under Secure Boot checks the kernel's keyrings for it.
	Signer string `json:"signer,omitempty"`
	SigKey string `json:"sig_key,omitempty"`
}

// ModuleFromInfo makes the manifest entry for a module file from what the file
// says about itself (info), its file name inside the set and the digest and
// size of the file as stored.
func ModuleFromInfo(info *modinfo.Info, file, sha256Hex string, size int64) Module {
	m := Module{
		Name:        info.Name,
		File:        file,
		SHA256:      sha256Hex,
		Size:        size,
		ELFSize:     info.Size,
		Compression: info.Compression,
		Vermagic:    info.Vermagic,
		Srcversion:  info.Srcversion,
		Version:     info.Version,
		Aliases:     slices.Clone(info.Aliases),
		Depends:     slices.Clone(info.Depends),
		Softdeps:    slices.Clone(info.Softdeps),
		Firmware:    slices.Clone(info.Firmware),
		Signed:      info.Signed,
	}
	if sig, err := modsig.ParsePKCS7(info.SigPKCS7); info.SigPKCS7 != nil && err == nil {
		m.Signer, m.SigKey = sig.Signer, sig.SigKey
	}
	return m
}

// SoftPre returns the modules the module's softdeps ask to load before it (the
// words after "pre:" up to "post:"), in order, without duplicates. They are
// modprobe arguments: a module's name or an alias ("crypto-crc32c").
func (m *Module) SoftPre() []string { return m.softdeps("pre:") }

// SoftPost returns the modules the module's softdeps ask to load after it (the
// words after "post:" up to "pre:"), in order, without duplicates; names or
// aliases, as SoftPre's.
func (m *Module) SoftPost() []string { return m.softdeps("post:") }

// softdeps returns the words of the softdep values that follow mode ("pre:" or
// "post:") up to the other mode, in order, without duplicates.
func (m *Module) softdeps(mode string) []string {
	var out []string
	for _, sd := range m.Softdeps {
		in := false
		for _, w := range strings.Fields(sd) {
			switch w {
			case "pre:", "post:":
				in = w == mode
			default:
				if in && !slices.Contains(out, w) {
					out = append(out, w)
				}
			}
		}
	}
	return out
}

// Build assembles the manifest of a set from its modules: it derives Kernel and
// Vermagic (every module must carry the same vermagic), External (dependencies
// not in the set) and Firmware, puts everything in canonical order and
// validates the result.
func Build(driver, version, flavor string, modules []Module, cacheKey map[string]string) (*Manifest, error) {
	if len(modules) == 0 {
		return nil, fmt.Errorf("manifest for %s %s: no modules", driver, version)
	}
	// Group modules by vermagic so a mixed set names every offender.
	var magics []string
	byMagic := map[string][]string{}
	for _, m := range modules {
		if _, ok := byMagic[m.Vermagic]; !ok {
			magics = append(magics, m.Vermagic)
		}
		byMagic[m.Vermagic] = append(byMagic[m.Vermagic], m.File)
	}
	if len(magics) > 1 {
		var parts []string
		for _, v := range magics {
			parts = append(parts, fmt.Sprintf("%q (%s)", v, strings.Join(byMagic[v], ", ")))
		}
		return nil, fmt.Errorf("manifest for %s %s: modules were built for different kernels: %s", driver, version, strings.Join(parts, "; "))
	}
	m := &Manifest{
		Format:   FormatVersion,
		Vermagic: magics[0],
		Driver:   driver,
		Version:  version,
		Flavor:   flavor,
		Modules:  slices.Clone(modules),
	}
	if f := strings.Fields(m.Vermagic); len(f) > 0 {
		m.Kernel = f[0]
	}
	if len(cacheKey) > 0 {
		m.CacheKey = make(map[string]string, len(cacheKey))
		for k, v := range cacheKey {
			m.CacheKey[k] = v
		}
	}
	inSet := map[string]bool{}
	for _, mod := range m.Modules {
		inSet[modname.Normalize(mod.Name)] = true
	}
	for _, mod := range m.Modules {
		for _, d := range mod.Depends {
			if !inSet[modname.Normalize(d)] {
				m.External = append(m.External, d)
			}
		}
		m.Firmware = append(m.Firmware, mod.Firmware...)
	}
	m.Canonicalize()
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// Canonicalize puts the manifest in canonical order: modules sorted by name,
// list fields sorted and free of duplicates (Softdeps keep file order), empty
// lists and maps set to nil.
func (m *Manifest) Canonicalize() {
	for i := range m.Modules {
		mod := &m.Modules[i]
		mod.Aliases = sortedSet(mod.Aliases)
		mod.Depends = sortedSet(mod.Depends)
		mod.Firmware = sortedSet(mod.Firmware)
		if len(mod.Softdeps) == 0 {
			mod.Softdeps = nil
		}
	}
	slices.SortStableFunc(m.Modules, func(a, b Module) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.File, b.File)
	})
	if len(m.Modules) == 0 {
		m.Modules = nil
	}
	m.External = sortedSet(m.External)
	m.Firmware = sortedSet(m.Firmware)
	if len(m.CacheKey) == 0 {
		m.CacheKey = nil
	}
}

// sortedSet returns s sorted without duplicates, or nil when empty.
func sortedSet(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}

// Clone returns a deep copy of m.
func (m *Manifest) Clone() *Manifest {
	c := *m
	c.Modules = make([]Module, len(m.Modules))
	for i, mod := range m.Modules {
		mod.Aliases = slices.Clone(mod.Aliases)
		mod.Depends = slices.Clone(mod.Depends)
		mod.Softdeps = slices.Clone(mod.Softdeps)
		mod.Firmware = slices.Clone(mod.Firmware)
		c.Modules[i] = mod
	}
	c.External = slices.Clone(m.External)
	c.Firmware = slices.Clone(m.Firmware)
	if m.SupportedGPUs != nil {
		f := *m.SupportedGPUs
		c.SupportedGPUs = &f
	}
	if m.CacheKey != nil {
		c.CacheKey = make(map[string]string, len(m.CacheKey))
		for k, v := range m.CacheKey {
			c.CacheKey[k] = v
		}
	}
	return &c
}

// Marshal returns the canonical JSON of m (a canonicalized copy; m is not
// changed): indented, map keys sorted, ending in a newline. Equal sets give
// equal bytes.
func Marshal(m *Manifest) ([]byte, error) {
	c := m.Clone()
	c.Canonicalize()
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("marshal manifest: %w", err)
	}
	return append(b, '\n'), nil
}

// ID returns the set's identity: the hex SHA-256 of its canonical JSON.
func ID(m *Manifest) (string, error) {
	b, err := Marshal(m)
	if err != nil {
		return "", err
	}
	return IDOf(b), nil
}

// IDOf returns the hex SHA-256 of canonical manifest bytes.
func IDOf(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:])
}

// Unmarshal parses manifest JSON, refusing unknown fields and other format
// versions. It does not validate; call Validate.
func Unmarshal(b []byte) (*Manifest, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("parse manifest: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("parse manifest: trailing data after the JSON object")
	}
	if m.Format != FormatVersion {
		return nil, fmt.Errorf("parse manifest: format %d, want %d", m.Format, FormatVersion)
	}
	return &m, nil
}

// KeyID returns the hex SHA-256 of a cache key's canonical JSON (keys sorted),
// the name the store files the key under. It is "" for an empty key.
func KeyID(cacheKey map[string]string) string {
	if len(cacheKey) == 0 {
		return ""
	}
	b, err := json.Marshal(cacheKey) // map keys are sorted; strings cannot fail
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
