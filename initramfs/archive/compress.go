package archive

import (
	"compress/gzip"
	"fmt"
	"io"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Compression names the compression applied to the cpio stream.
type Compression string

// The compressions an archive can be written with. Both Debian cloud kernels
// kpreload targets (6.1 and 6.12) are built with CONFIG_RD_ZSTD=y, CONFIG_RD_LZ4=y
// and CONFIG_RD_GZIP=y.
const (
	// Zstd is a single zstd frame (the default): small, and fast to decompress at boot.
	Zstd Compression = "zstd"
	// LZ4 is LZ4's legacy frame format (`lz4 -l`, 8 MiB blocks), the only LZ4
	// format the kernel unpacks (lib/decompress_unlz4.c). About 25% larger than
	// zstd and quicker to unpack (under TCG, 0.14 s instead of 0.19 s for a
	// 7 MB initramfs), though /init did not start measurably earlier: the
	// kernel unpacks while its other initcalls run.
	LZ4 Compression = "lz4"
	// Gzip is a single gzip member with no file name and mtime 0.
	Gzip Compression = "gzip"
	// None is the plain newc cpio stream.
	None Compression = "none"
)

// ZstdWindowSize is the zstd window (longest back-reference) the encoder uses and
// declares in the frame header. The kernel unpacks an initramfs with the streaming
// decoder (lib/decompress_unzstd.c, because init/initramfs.c passes a flush
// callback) and allocates a buffer of the frame's declared window size while
// booting, so the window is kept at 8 MiB: the size that file calls the expected
// maximum, the window of `zstd -19` that the kernel's own build uses for its
// built-in initramfs, and the minimum the zstd format recommends every decoder
// supports. Long-distance matching (`zstd --long`, 128 MiB windows) is never used.
const ZstdWindowSize = 8 << 20

// Fixed encoder levels: changing them changes the archive bytes.
const (
	zstdLevel = zstd.SpeedBetterCompression
	gzipLevel = gzip.BestCompression
	lz4Level  = lz4.Level9 // lz4 -9 (HC): smaller, and as fast to unpack
)

// ParseCompression parses a compression name: "zstd" (also the empty string),
// "lz4", "gzip" or "none".
func ParseCompression(s string) (Compression, error) {
	switch c := Compression(strings.ToLower(strings.TrimSpace(s))); c {
	case "":
		return Zstd, nil
	case Zstd, LZ4, Gzip, None:
		return c, nil
	}
	return "", fmt.Errorf("unknown compression %q, want %q, %q, %q or %q", s, Zstd, LZ4, Gzip, None)
}

// String returns the compression's name.
func (c Compression) String() string { return string(c) }

// Ext returns the file name extension conventional for c: ".zst", ".lz4", ".gz" or "".
func (c Compression) Ext() string {
	switch c {
	case Zstd:
		return ".zst"
	case LZ4:
		return ".lz4"
	case Gzip:
		return ".gz"
	}
	return ""
}

// nopCloser adds a no-op Close to a writer.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// compressor returns a writer that compresses into w with c, deterministically:
// a single-threaded zstd encoder with fixed level and window, a single-threaded
// legacy-format LZ4 encoder with a fixed level, or a gzip writer with a fixed
// level and an empty header (no name, no comment, mtime 0).
func compressor(w io.Writer, c Compression) (io.WriteCloser, error) {
	switch c {
	case Zstd:
		enc, err := zstd.NewWriter(w,
			zstd.WithEncoderConcurrency(1),
			zstd.WithEncoderLevel(zstdLevel),
			zstd.WithWindowSize(ZstdWindowSize),
			zstd.WithSingleSegment(false),
			zstd.WithEncoderCRC(true),
		)
		if err != nil {
			return nil, fmt.Errorf("create zstd encoder: %w", err)
		}
		return enc, nil
	case LZ4:
		zw := lz4.NewWriter(w)
		if err := zw.Apply(
			lz4.LegacyOption(true),
			lz4.CompressionLevelOption(lz4Level),
			lz4.ConcurrencyOption(1),
		); err != nil {
			return nil, fmt.Errorf("create lz4 encoder: %w", err)
		}
		return zw, nil
	case Gzip:
		gz, err := gzip.NewWriterLevel(w, gzipLevel)
		if err != nil {
			return nil, fmt.Errorf("create gzip writer: %w", err)
		}
		return gz, nil
	case None:
		return nopCloser{w}, nil
	}
	return nil, fmt.Errorf("unknown compression %q, want %q, %q, %q or %q", string(c), Zstd, LZ4, Gzip, None)
}
