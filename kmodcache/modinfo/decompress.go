package modinfo

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"

	"github.com/kpreload/kpreload/internal/inroot"
)

// MaxImageSize is the largest uncompressed module image Decompress produces.
// The largest real modules (nvidia.ko) are well under 200 MiB; the limit only
// stops a corrupt or hostile file from exhausting memory.
const MaxImageSize = 1 << 30

// Compression names returned by Decompress and stored in Info.Compression.
const (
	CompressionNone = ""
	CompressionXZ   = "xz"
	CompressionZstd = "zstd"
	CompressionGzip = "gzip"
)

// Magic numbers at the start of each supported format.
var (
	magicELF  = []byte{0x7f, 'E', 'L', 'F'}
	magicXZ   = []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}
	magicZstd = []byte{0x28, 0xb5, 0x2f, 0xfd}
	magicGzip = []byte{0x1f, 0x8b}
)

// errTooLarge reports an image that grows past MaxImageSize when decompressed.
var errTooLarge = fmt.Errorf("decompressed image larger than %d bytes", MaxImageSize)

// Decompress returns the ELF image held in data, which may be xz, zstd or gzip
// compressed or a plain ELF file (returned as is). The format is detected by
// its magic bytes, never by name; name only labels errors. compression is one
// of the Compression* constants.
func Decompress(name string, data []byte) (elf []byte, compression string, err error) {
	switch {
	case len(data) == 0:
		return nil, "", fmt.Errorf("%s: empty file", name)
	case bytes.HasPrefix(data, magicELF):
		return data, CompressionNone, nil
	case bytes.HasPrefix(data, magicXZ):
		elf, err = decompressXZ(data)
		compression = CompressionXZ
	case bytes.HasPrefix(data, magicZstd):
		elf, err = decompressZstd(data)
		compression = CompressionZstd
	case bytes.HasPrefix(data, magicGzip):
		elf, err = decompressGzip(data)
		compression = CompressionGzip
	default:
		return nil, "", fmt.Errorf("%s: unknown format (starts with % x): want ELF, xz, zstd or gzip", name, head(data, 8))
	}
	if err != nil {
		return nil, "", fmt.Errorf("%s: %s decompression: %w", name, compression, err)
	}
	if len(elf) == 0 {
		return nil, "", fmt.Errorf("%s: %s stream holds no data (truncated?)", name, compression)
	}
	if !bytes.HasPrefix(elf, magicELF) {
		return nil, "", fmt.Errorf("%s: %s content is not an ELF file (starts with % x)", name, compression, head(elf, 8))
	}
	return elf, compression, nil
}

// Open reads the module file at path and returns its uncompressed ELF image
// and the compression it was stored with (see Decompress).
func Open(path string) (elf []byte, compression string, err error) {
	data, err := inroot.ReadPath(path, MaxImageSize)
	if err != nil {
		return nil, "", fmt.Errorf("read module: %w", err)
	}
	return Decompress(path, data)
}

// head returns at most n leading bytes of b, for error messages.
func head(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// readAllLimited reads r to the end into a buffer sized from hint, failing once
// more than MaxImageSize bytes come out.
func readAllLimited(r io.Reader, hint int) ([]byte, error) {
	hint = min(max(hint, 4096), MaxImageSize)
	buf := bytes.NewBuffer(make([]byte, 0, hint))
	n, err := buf.ReadFrom(io.LimitReader(r, MaxImageSize+1))
	if err != nil {
		return nil, err
	}
	if n > MaxImageSize {
		return nil, errTooLarge
	}
	return buf.Bytes(), nil
}

// decompressXZ decodes an xz stream (or several concatenated ones). A header
// may announce an LZMA2 dictionary of up to 4 GiB, which the xz package
// allocates up front; Go hands out such memory lazily, so only the pages the
// decoder writes to (about the output size) are really used.
func decompressXZ(data []byte) ([]byte, error) {
	r, err := xz.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	return readAllLimited(r, 5*len(data))
}

// decompressZstd decodes zstd frames with a single-goroutine, low-memory
// decoder, as fits the boot-time /init.
func decompressZstd(data []byte) ([]byte, error) {
	d, err := zstd.NewReader(nil,
		zstd.WithDecoderLowmem(true),
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxMemory(MaxImageSize),
	)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	out, err := d.DecodeAll(data, nil)
	if errors.Is(err, zstd.ErrDecoderSizeExceeded) {
		return nil, errTooLarge
	}
	return out, err
}

// decompressGzip decodes a gzip stream (or several concatenated ones).
func decompressGzip(data []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return readAllLimited(r, 4*len(data))
}
