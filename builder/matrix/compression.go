package matrix

import (
	"fmt"
	"os"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// Module compressions a cell can store its modules in (the key's
// module_compression).
const (
	// CompressionNone is plain .ko files.
	CompressionNone = "none"
	// CompressionZstd is .ko.zst files: the kernel decompresses them where it
	// can (MODULE_DECOMPRESS with MODULE_COMPRESS_ZSTD), /init does elsewhere.
	CompressionZstd = "zstd"
)

// ModuleCompression is the one decision of how a kernel's cells store their
// modules, from the kernel's configuration (its .config), kpreload's and
// never the build host's: it is in every key, and images carry cells as
// stored. By measurement (docs/benchmarks.md, scripts/nvidia-breakdown.sh):
// the bytes stored are the bytes /init hashes before the kernel sees them
// (and the kernel again for a signature), so a module 4.8 times smaller
// saves more than zstd's decompression costs, wherever it is done; the
// kernel's own xz decompression costs as much as it saves, so xz is never
// chosen. Hence zstd wherever the module can reach the kernel decompressed:
// by the kernel itself, or by /init through init_module; plain .ko where the
// kernel takes modules from files only (LoadPin enforcing, or IMA requiring
// module signatures refuses init_module) and cannot decompress zstd.
func ModuleCompression(config map[string]string) string {
	kernelZstd := config["CONFIG_MODULE_DECOMPRESS"] == "y" && config["CONFIG_MODULE_COMPRESS_ZSTD"] == "y"
	filesOnly := config["CONFIG_SECURITY_LOADPIN_ENFORCE"] == "y" || config["CONFIG_IMA_APPRAISE_REQUIRE_MODULE_SIGS"] == "y"
	if kernelZstd || !filesOnly {
		return CompressionZstd
	}
	return CompressionNone
}

// compressModules stores the signed module files as compression says: as
// they are for CompressionNone, else each replaced by its .ko.zst (zstd at
// its best level, one frame, the same bytes on every host). A module dkms
// left compressed is refused: cells are compressed by this decision alone.
func compressModules(files []string, compression string) ([]string, error) {
	for _, f := range files {
		if !strings.HasSuffix(f, ".ko") {
			return nil, fmt.Errorf("module %s: dkms left it compressed; cells hold what ModuleCompression decides", f)
		}
	}
	switch compression {
	case CompressionNone:
		return files, nil
	case CompressionZstd:
	default:
		return nil, fmt.Errorf("module compression %q: want %s or %s", compression, CompressionNone, CompressionZstd)
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	defer enc.Close()
	out := make([]string, len(files))
	for i, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("compress module: %w", err)
		}
		out[i] = f + ".zst"
		if err := os.WriteFile(out[i], enc.EncodeAll(data, nil), 0o644); err != nil {
			return nil, fmt.Errorf("compress module: %w", err)
		}
		if err := os.Remove(f); err != nil {
			return nil, fmt.Errorf("compress module: %w", err)
		}
	}
	return out, nil
}
