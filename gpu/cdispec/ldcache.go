package cdispec

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"path/filepath"

	"github.com/kpreload/kpreload/internal/inroot"
)

// LdcacheEntry is one library of the linker cache: its soname and path.
type LdcacheEntry struct {
	Name, Path string
}

const (
	oldMagic = "ld.so-1.7.0"
	newMagic = "glibc-ld.so.cache1.1"
)

// ReadLdcache parses the glibc linker cache name of the tree at root
// (/etc/ld.so.cache, what `ldconfig -p` prints) in the current format, alone
// or after an old-format section. The file is read inside root, at most
// inroot.MaxLarge bytes. The error names the file and wraps fs.ErrNotExist
// when it does not exist.
func ReadLdcache(root, name string) ([]LdcacheEntry, error) {
	b, err := inroot.ReadFile(root, name, inroot.MaxLarge)
	if err != nil {
		return nil, fmt.Errorf("ld cache: %w", err)
	}
	entries, err := parseLdcache(b)
	if err != nil {
		return nil, fmt.Errorf("ld cache %s: %w", filepath.Join(root, name), err)
	}
	return entries, nil
}

func parseLdcache(b []byte) ([]LdcacheEntry, error) {
	start := 0
	if bytes.HasPrefix(b, []byte(oldMagic)) {
		// Old header: magic (11 bytes, padded to 12), nlibs; entries of 3 int32.
		if len(b) < 16 {
			return nil, fmt.Errorf("short old-format header")
		}
		n := int(binary.LittleEndian.Uint32(b[12:16]))
		start = 16 + n*12
		start = (start + 7) &^ 7 // the new section is aligned like its header
		if start > len(b) {
			return nil, fmt.Errorf("old-format section runs past the end")
		}
	}
	h := b[start:]
	if !bytes.HasPrefix(h, []byte(newMagic)) {
		return nil, fmt.Errorf("not a glibc-ld.so.cache1.1 file")
	}
	// Header: magic+version (20 bytes), nlibs, len_strings, flags(1)+pad(3),
	// extension offset, 3 unused words: 48 bytes. Entries: flags, key, value,
	// osversion (int32 each), hwcap (uint64): 24 bytes. String offsets count from
	// the start of the new-format header.
	const hdr, entSize = 48, 24
	if len(h) < hdr {
		return nil, fmt.Errorf("short header")
	}
	n := int(binary.LittleEndian.Uint32(h[20:24]))
	if hdr+n*entSize > len(h) {
		return nil, fmt.Errorf("%d entries run past the end", n)
	}
	str := func(off uint32) (string, error) {
		if int(off) >= len(h) {
			return "", fmt.Errorf("string offset %d past the end", off)
		}
		s := h[off:]
		if i := bytes.IndexByte(s, 0); i >= 0 {
			s = s[:i]
		}
		return string(s), nil
	}
	entries := make([]LdcacheEntry, 0, n)
	for i := 0; i < n; i++ {
		e := h[hdr+i*entSize:]
		key, err := str(binary.LittleEndian.Uint32(e[4:8]))
		if err != nil {
			return nil, err
		}
		val, err := str(binary.LittleEndian.Uint32(e[8:12]))
		if err != nil {
			return nil, err
		}
		entries = append(entries, LdcacheEntry{Name: key, Path: val})
	}
	return entries, nil
}
