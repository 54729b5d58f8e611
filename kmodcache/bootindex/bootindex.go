// Package bootindex defines the compact per-kernel index that /init reads at boot:
// which module sets exist for one kernel release, where their files are, what they
// match (modalias patterns) and what they depend on. It is small and self-contained
// so /init never has to parse the whole cache.
package bootindex

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/kmodcache/names"
)

// FormatVersion is the current index format; readers refuse other versions.
const FormatVersion = 1

// MaxFile bounds a boot index as Read reads it (a regular file only: a
// FIFO or a device in its place is refused at once).
const MaxFile = 16 << 20

// Names shared by the cache, the initramfs and /init.
const (
	// KernelSetID is the ID of the set of the kernel's own modules.
	KernelSetID = "kernel"
	// IndexDir is the directory of a module cache that holds its boot indexes.
	IndexDir = "index"
	// InitramfsName is the boot index file inside an initramfs, under /lib/modules/<release>/.
	InitramfsName = "kpreload.index.json"
	// RootCacheDir is the module cache of a root filesystem (an image's), relative to its root.
	RootCacheDir = "var/lib/kpreload/cache"
)

// Path returns the boot index file of a kernel release in a module cache directory.
func Path(cacheDir, kernel string) string {
	return filepath.Join(cacheDir, IndexDir, kernel+".json")
}

// Index lists the module sets available for one kernel release.
type Index struct {
	Format int `json:"format"`
	// Kernel is the kernel release (uname -r) every module in the index was built for.
	Kernel string `json:"kernel"`
	Sets   []Set  `json:"sets"`
	// Complete, in an initramfs's index, says the root filesystem's module
	// cache holds no driver set for this kernel that this index lacks (the
	// image builder put the same sets in both), so /init may take the driver
	// decision, and start loading, before the root is mounted.
	Complete bool `json:"complete,omitempty"`
}

// Set is a group of modules that are loaded together: the kernel's own boot-critical
// modules, or one driver version built for this kernel.
type Set struct {
	// ID is the content address of the set's manifest (sha256 hex), or KernelSetID for the kernel's own modules.
	ID string `json:"id"`
	// Driver, Version and Flavor name the driver ("nvidia", "535.261.03", "open"); empty for kernel modules.
	Driver  string `json:"driver,omitempty"`
	Version string `json:"version,omitempty"`
	Flavor  string `json:"flavor,omitempty"`
	// Dir is where the set's module files are, relative to the directory holding the index file.
	Dir     string   `json:"dir"`
	Modules []Module `json:"modules"`
	// Firmware lists firmware files (relative to /lib/firmware) the set's modules request.
	Firmware []string `json:"firmware,omitempty"`
	// SupportedGPUs is the driver's supported-gpus.json (NVIDIA's format),
	// relative to the set's Dir; empty when the driver ships none.
	SupportedGPUs string `json:"supported_gpus,omitempty"`
}

// Module is one module file of a set.
type Module struct {
	Name string `json:"name"`
	// Path is the module file relative to the set's Dir.
	Path string `json:"path"`
	// SHA256 is the hex digest of the file as stored (compressed if Compression is set).
	SHA256 string `json:"sha256"`
	// Size is the size of the file as stored, in bytes; 0 when unknown.
	Size int64 `json:"size,omitempty"`
	// Verity is the file's fs-verity digest (the manifest's); empty when
	// the set records none. The loader compares it with what the kernel
	// measures of a file that has fs-verity on, instead of hashing it.
	Verity      string   `json:"verity,omitempty"`
	Compression string   `json:"compression,omitempty"`
	Vermagic    string   `json:"vermagic"`
	Aliases     []string `json:"aliases,omitempty"`
	Depends     []string `json:"depends,omitempty"`
	// SoftPre lists modules a softdep asks to load before this one: names or
	// aliases ("crypto-crc32c"), resolved at load time as modprobe resolves them.
	SoftPre []string `json:"softpre,omitempty"`
	// SoftPost lists modules a softdep asks to load after this one (names or
	// aliases, as SoftPre's).
	SoftPost []string `json:"softpost,omitempty"`
	Firmware []string `json:"firmware,omitempty"`
	// Unsigned is true when the module is known to carry no signature (the
	// cache's manifest says so); false means signed, or not known.
	Unsigned bool `json:"unsigned,omitempty"`
	// Signer and SigKey name the certificate the module is signed with
	// (the manifest's, as modinfo prints them); empty when unsigned or unknown.
	Signer string `json:"signer,omitempty"`
	SigKey string `json:"sig_key,omitempty"`
}

// Read loads an index file and checks it as Parse does.
func Read(path string) (*Index, error) {
	b, err := inroot.ReadPath(path, MaxFile)
	if err != nil {
		return nil, fmt.Errorf("boot index: %w", err)
	}
	return Parse(path, b)
}

// ReadIn loads the index file name of the tree at root (a root filesystem's
// module cache: the path and every link on it resolved inside root, a
// regular file of at most MaxFile bytes) and checks it as Parse does. It is
// the one reader of a root's boot index: install, status and the kernel
// hooks read through it.
func ReadIn(root, name string) (*Index, error) {
	b, err := inroot.ReadFile(root, name, MaxFile)
	if err != nil {
		return nil, fmt.Errorf("boot index: %w", err)
	}
	return Parse(inroot.Host(root, name), b)
}

// Parse decodes an index read from file (named in errors) and checks its
// format and its names: the kernel release, and each set's id, driver,
// version and flavour, follow kmodcache/names (readers make paths of them
// and print them). Every reader of a boot index checks it so.
func Parse(file string, b []byte) (*Index, error) {
	var ix Index
	if err := json.Unmarshal(b, &ix); err != nil {
		return nil, fmt.Errorf("boot index %s: %w", file, err)
	}
	if ix.Format != FormatVersion {
		return nil, fmt.Errorf("boot index %s: format %d, want %d", file, ix.Format, FormatVersion)
	}
	if err := ix.checkNames(); err != nil {
		return nil, fmt.Errorf("boot index %s: %w", file, err)
	}
	return &ix, nil
}

// checkNames checks the index's kernel release, each set's id and each
// driver set's driver, version and flavour against kmodcache/names.
func (ix *Index) checkNames() error {
	if err := names.Check("kernel", ix.Kernel); err != nil {
		return err
	}
	for i, s := range ix.Sets {
		if err := names.CheckOptional("id", s.ID); err != nil {
			return fmt.Errorf("sets[%d]: %w", i, err)
		}
		if s.Driver == "" && s.Version == "" && s.Flavor == "" {
			continue // plain modules (the kernel's own, an initramfs's "extra" files): no driver
		}
		err := errors.Join(names.Check("driver", s.Driver), names.Check("version", s.Version), names.CheckOptional("flavor", s.Flavor))
		if err != nil {
			return fmt.Errorf("sets[%d]: %w", i, err)
		}
	}
	return nil
}

// Marshal returns the index as indented JSON ending in a newline, the form Write
// stores; equal indexes give equal bytes.
func Marshal(ix *Index) ([]byte, error) {
	b, err := json.MarshalIndent(ix, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("marshal boot index: %w", err)
	}
	return append(b, '\n'), nil
}

// Write stores the index at path atomically: the JSON goes to a temporary file in
// the same directory, is synced and renamed over path, and the directory is
// synced, so a reader (or a crash at any point) sees the old index or the new
// one, never a half file (fileutil.WriteAtomic). Temporary files are named ".tmp-*".
func Write(path string, ix *Index) error {
	b, err := Marshal(ix)
	if err != nil {
		return fmt.Errorf("boot index %s: %w", path, err)
	}
	if err := fileutil.WriteAtomic(path, b, 0o644, true); err != nil {
		return fmt.Errorf("boot index %s: %w", path, err)
	}
	return nil
}
