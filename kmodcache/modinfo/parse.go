package modinfo

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/kmodcache/modname"
)

// SignatureMagic ends every module that carries an appended signature
// (scripts/sign-file, include/linux/module_signature.h).
const SignatureMagic = "~Module signature appended~\n"

// sigInfoSize is the size of struct module_signature, which sits between the
// signature blob and SignatureMagic; its last four bytes are the big-endian
// length of the signature blob.
const sigInfoSize = 12

// pkeyIDPKCS7 is module_signature.id_type for a PKCS#7 signature, the only kind
// the kernel verifies.
const pkeyIDPKCS7 = 2

// versionEntrySize is the size of one struct modversion_info: an unsigned
// long CRC followed by a NUL-padded name filling the rest of 64 bytes
// (MODULE_NAME_LEN is 64 - sizeof(unsigned long)).
const versionEntrySize = 64

// ReadFile reads the module at path (plain or compressed) and returns what it
// says about itself, with File, Compression and Size set. A plain module is
// read by its sections only (ELF headers, .modinfo, __versions and the
// signature trailer), never as a whole: a 65 MB nvidia.ko costs a few
// reads; a compressed one is decompressed first.
func ReadFile(path string) (*Info, error) {
	f, err := inroot.OpenPath(path)
	if err != nil {
		return nil, fmt.Errorf("read module: %w", err)
	}
	defer f.Close()
	return ReadFrom(f)
}

// ReadFrom is ReadFile for a module file already open, named by f.Name();
// the caller closes f.
func ReadFrom(f *os.File) (*Info, error) {
	path := f.Name()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read module: %w", err)
	}
	magic := make([]byte, len(magicELF))
	if n, _ := f.ReadAt(magic, 0); fi.Mode().IsRegular() && n == len(magic) && bytes.Equal(magic, magicELF) {
		return parseAt(path, f, fi.Size())
	}
	// Read whole (at most MaxImageSize), into room for its size and one byte more.
	data := make([]byte, 0, min(fi.Size(), MaxImageSize)+1)
	for int64(len(data)) <= MaxImageSize {
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
		n, err := f.ReadAt(data[len(data):cap(data)], int64(len(data)))
		data = data[:len(data)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read module %s: %w", path, err)
		}
	}
	if int64(len(data)) > MaxImageSize {
		return nil, fmt.Errorf("read module %s: %w: more than %d bytes", path, inroot.ErrTooLarge, int64(MaxImageSize))
	}
	image, compression, err := Decompress(path, data)
	if err != nil {
		return nil, err
	}
	info, err := Parse(path, image)
	if err != nil {
		return nil, err
	}
	info.Compression = compression
	return info, nil
}

// Parse reads an uncompressed module image: the .modinfo section, the
// __versions table and the appended-signature marker. name labels errors and
// becomes Info.File. Malformed input gives an error naming name, never a panic.
func Parse(name string, image []byte) (*Info, error) {
	return parseAt(name, bytes.NewReader(image), int64(len(image)))
}

// parseAt is Parse of the size-byte image r.
func parseAt(name string, r io.ReaderAt, size int64) (*Info, error) {
	if size == 0 {
		return nil, fmt.Errorf("%s: empty image", name)
	}
	start := make([]byte, min(size, 8))
	if _, err := r.ReadAt(start, 0); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if !bytes.HasPrefix(start, magicELF) {
		return nil, fmt.Errorf("%s: not an ELF file (starts with % x)", name, start)
	}
	trailer := make([]byte, min(size, int64(sigInfoSize+len(SignatureMagic))))
	if _, err := r.ReadAt(trailer, size-int64(len(trailer))); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	signed, err := checkSignature(trailer, size)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	f, err := elf.NewFile(io.NewSectionReader(r, 0, size))
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("%s: truncated ELF image (%d bytes): %w", name, size, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: malformed ELF image: %w", name, err)
	}
	info := &Info{
		File:   name,
		Size:   size,
		Signed: signed,
	}
	if signed {
		if info.SigPKCS7, err = sigBlob(r, size, trailer); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}

	mi, err := sectionBytes(f, r, size, ".modinfo")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if mi == nil {
		return nil, fmt.Errorf("%s: no .modinfo section: not a kernel module", name)
	}
	info.setFields(mi)
	if info.Name == "" {
		// Kernels before 5.3 did not write name= into .modinfo; kmod then
		// names the module after its file.
		info.Name = modname.FromPath(name)
	}

	vers, err := sectionBytes(f, r, size, "__versions")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if vers != nil {
		info.Versions, err = parseVersions(vers, f.Class, f.ByteOrder)
		if err != nil {
			return nil, fmt.Errorf("%s: __versions: %w", name, err)
		}
	}
	return info, nil
}

// checkSignature reports whether image ends with an appended module signature.
// When SignatureMagic is there, the struct module_signature before it must be
// well-formed as the kernel's mod_check_sig requires (signature length inside
// the file, reserved fields zero): the kernel refuses a module whose trailer is
// malformed (EBADMSG) even without signature enforcement, so that is an error.
//
// trailer is the image's last bytes (at most sigInfoSize+len(SignatureMagic)
// of them, all of a smaller image), size the whole image's size.
func checkSignature(trailer []byte, size int64) (bool, error) {
	if !bytes.HasSuffix(trailer, []byte(SignatureMagic)) {
		return false, nil
	}
	restLen := size - int64(len(SignatureMagic))
	if restLen < sigInfoSize {
		return false, fmt.Errorf("malformed module signature: %d bytes before %q, want at least %d",
			restLen, strings.TrimSpace(SignatureMagic), sigInfoSize)
	}
	rest := trailer[:len(trailer)-len(SignatureMagic)]
	ms := rest[len(rest)-sigInfoSize:]
	// struct module_signature: algo, hash, id_type, signer_len, key_id_len, __pad[3], __be32 sig_len.
	sigLen := binary.BigEndian.Uint32(ms[8:])
	if uint64(sigLen) >= uint64(restLen-sigInfoSize) {
		return false, fmt.Errorf("malformed module signature: signature length %d does not fit in the %d-byte file",
			sigLen, size)
	}
	// A signature of another kind (id_type) is ENOPKG to the kernel: loadable
	// unless signatures are enforced, so it still counts as signed here.
	if ms[2] == pkeyIDPKCS7 && (!allZero(ms[0:2]) || !allZero(ms[3:8])) {
		return false, fmt.Errorf("malformed module signature: reserved fields of struct module_signature are not zero (% x)", ms[:8])
	}
	return true, nil
}

// sigBlob returns the PKCS#7 blob of a signed image whose trailer
// checkSignature accepted, or nil for a signature of another kind.
func sigBlob(r io.ReaderAt, size int64, trailer []byte) ([]byte, error) {
	ms := trailer[len(trailer)-len(SignatureMagic)-sigInfoSize : len(trailer)-len(SignatureMagic)]
	if ms[2] != pkeyIDPKCS7 {
		return nil, nil
	}
	n := int64(binary.BigEndian.Uint32(ms[8:]))
	blob := make([]byte, n)
	if _, err := r.ReadAt(blob, size-int64(len(SignatureMagic))-sigInfoSize-n); err != nil {
		return nil, fmt.Errorf("module signature: %w", err)
	}
	return blob, nil
}

// allZero reports whether every byte of b is zero.
func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// sectionBytes returns the contents of the named section, read from the
// size-byte image r, or nil when there is no such section. It checks the
// section's bounds itself rather than trusting Section.Data, so that a
// hostile header cannot make it read past the image or allocate a huge
// zero-filled buffer (SHT_NOBITS).
func sectionBytes(f *elf.File, r io.ReaderAt, size int64, section string) ([]byte, error) {
	s := f.Section(section)
	if s == nil {
		return nil, nil
	}
	switch {
	case s.Type == elf.SHT_NOBITS:
		return nil, fmt.Errorf("section %s has no data in the file (SHT_NOBITS)", section)
	case s.Flags&elf.SHF_COMPRESSED != 0:
		return nil, fmt.Errorf("section %s is compressed (SHF_COMPRESSED), which modules never are", section)
	case s.Offset > uint64(size) || s.Size > uint64(size)-s.Offset:
		return nil, fmt.Errorf("section %s (offset %d, size %d) runs past the end of the %d-byte image",
			section, s.Offset, s.Size, size)
	}
	b := make([]byte, s.Size)
	if len(b) == 0 {
		return b, nil
	}
	if _, err := r.ReadAt(b, int64(s.Offset)); err != nil {
		return nil, fmt.Errorf("section %s: %w", section, err)
	}
	return b, nil
}

// setFields fills info from the NUL-separated key=value strings of a .modinfo
// section. Empty strings (alignment padding) are skipped; a string without
// "=" is a key with an empty value, as kmod reads it.
func (info *Info) setFields(modinfo []byte) {
	info.Fields = map[string][]string{}
	for entry := range bytes.SplitSeq(modinfo, []byte{0}) {
		if len(entry) == 0 {
			continue
		}
		key, value, _ := strings.Cut(string(entry), "=")
		if _, seen := info.Fields[key]; !seen {
			info.Keys = append(info.Keys, key)
		}
		info.Fields[key] = append(info.Fields[key], value)
		switch key {
		case "name":
			info.Name = value
		case "vermagic":
			info.Vermagic = value
		case "srcversion":
			info.Srcversion = value
		case "version":
			info.Version = value
		case "license":
			info.License = value
		case "description":
			info.Description = value
		case "alias":
			info.Aliases = append(info.Aliases, value)
		case "depends":
			info.Depends = append(info.Depends, splitDepends(value)...)
		case "softdep":
			info.Softdeps = append(info.Softdeps, value)
		case "firmware":
			info.Firmware = append(info.Firmware, value)
		}
	}
}

// splitDepends splits a "depends=" value on commas; an empty value gives nil.
func splitDepends(value string) []string {
	var deps []string
	for d := range strings.SplitSeq(value, ",") {
		if d != "" {
			deps = append(deps, d)
		}
	}
	return deps
}

// parseVersions decodes a __versions section: 64-byte entries holding a CRC
// (8 bytes on 64-bit ELF, 4 on 32-bit) and a NUL-terminated, NUL-padded name.
func parseVersions(b []byte, class elf.Class, order binary.ByteOrder) ([]Symbol, error) {
	var crcSize int
	switch class {
	case elf.ELFCLASS64:
		crcSize = 8
	case elf.ELFCLASS32:
		crcSize = 4
	default:
		return nil, fmt.Errorf("unknown ELF class %v", class)
	}
	if len(b)%versionEntrySize != 0 {
		return nil, fmt.Errorf("size %d is not a multiple of the %d-byte entry size", len(b), versionEntrySize)
	}
	syms := make([]Symbol, 0, len(b)/versionEntrySize)
	for off := 0; off < len(b); off += versionEntrySize {
		e := b[off : off+versionEntrySize]
		var crc uint64
		if crcSize == 8 {
			crc = order.Uint64(e)
		} else {
			crc = uint64(order.Uint32(e))
		}
		raw := e[crcSize:]
		n := bytes.IndexByte(raw, 0)
		if n < 0 {
			return nil, fmt.Errorf("entry %d: name is not NUL-terminated", off/versionEntrySize)
		}
		syms = append(syms, Symbol{Name: string(raw[:n]), CRC: crc})
	}
	return syms, nil
}
