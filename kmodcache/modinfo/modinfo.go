// Package modinfo reads Linux kernel module files (.ko, .ko.xz, .ko.zst, .ko.gz):
// the ELF .modinfo section, the __versions (modversions) table and whether a
// module signature is appended.
package modinfo

// Symbol is one entry of a module's __versions table: an imported symbol and the
// CRC the module was built against.
type Symbol struct {
	Name string `json:"name"`
	CRC  uint64 `json:"crc"`
}

// Info is what a module file says about itself.
type Info struct {
	// File is the path the module was read from.
	File string `json:"file"`
	// Compression is "" for a plain ELF file, or "xz", "zstd" or "gzip".
	Compression string `json:"compression,omitempty"`
	// Size is the size of the uncompressed ELF image in bytes, including any
	// appended signature.
	Size        int64    `json:"size"`
	Name        string   `json:"name"`
	Vermagic    string   `json:"vermagic"`
	Srcversion  string   `json:"srcversion,omitempty"`
	Version     string   `json:"version,omitempty"`
	License     string   `json:"license,omitempty"`
	Description string   `json:"description,omitempty"`
	Aliases     []string `json:"aliases,omitempty"`
	// Depends lists the modules this one needs, from modinfo "depends=".
	Depends []string `json:"depends,omitempty"`
	// Softdeps holds each "softdep=" value verbatim ("pre: a b post: c").
	Softdeps []string `json:"softdeps,omitempty"`
	Firmware []string `json:"firmware,omitempty"`
	// Versions is the modversions table; empty when the kernel lacks CONFIG_MODVERSIONS.
	Versions []Symbol `json:"versions,omitempty"`
	// Signed reports whether a module signature ("~Module signature appended~") follows the ELF image.
	Signed bool `json:"signed"`
	// SigPKCS7 is the PKCS#7 blob of a PKCS#7 signature (kmodcache/modsig
	// reads its signer), nil when the module has none.
	SigPKCS7 []byte `json:"-"`
	// Fields holds every .modinfo key with all its values, in file order.
	Fields map[string][]string `json:"fields,omitempty"`
	// Keys lists the distinct .modinfo keys in order of first appearance, so
	// that Fields can be printed in file order.
	Keys []string `json:"keys,omitempty"`
}
