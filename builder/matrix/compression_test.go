package matrix

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/modinfo"
)

// TestModuleCompression is the decision's table: zstd wherever the module
// reaches the kernel decompressed (by the kernel, or by /init through
// init_module), plain where the kernel takes files only and cannot
// decompress zstd; never the kernel's xz.
func TestModuleCompression(t *testing.T) {
	tests := []struct {
		name   string
		config map[string]string
		want   string
	}{
		{"Debian 6.1 cloud: no in-kernel decompression", map[string]string{"CONFIG_MODULE_COMPRESS_NONE": "y"}, CompressionZstd},
		{"Debian 6.12 cloud: the kernel decompresses xz only", map[string]string{"CONFIG_MODULE_COMPRESS": "y", "CONFIG_MODULE_COMPRESS_XZ": "y", "CONFIG_MODULE_DECOMPRESS": "y"}, CompressionZstd},
		{"the kernel decompresses zstd", map[string]string{"CONFIG_MODULE_COMPRESS_ZSTD": "y", "CONFIG_MODULE_DECOMPRESS": "y"}, CompressionZstd},
		{"LoadPin enforcing, zstd in the kernel", map[string]string{"CONFIG_MODULE_COMPRESS_ZSTD": "y", "CONFIG_MODULE_DECOMPRESS": "y", "CONFIG_SECURITY_LOADPIN_ENFORCE": "y"}, CompressionZstd},
		{"LoadPin enforcing, xz in the kernel", map[string]string{"CONFIG_MODULE_COMPRESS_XZ": "y", "CONFIG_MODULE_DECOMPRESS": "y", "CONFIG_SECURITY_LOADPIN_ENFORCE": "y"}, CompressionNone},
		{"IMA requires module signatures, no decompression", map[string]string{"CONFIG_IMA_APPRAISE_REQUIRE_MODULE_SIGS": "y"}, CompressionNone},
		{"zstd compression without MODULE_DECOMPRESS, LoadPin", map[string]string{"CONFIG_MODULE_COMPRESS_ZSTD": "y", "CONFIG_SECURITY_LOADPIN_ENFORCE": "y"}, CompressionNone},
		{"no configuration read", nil, CompressionZstd},
	}
	for _, tt := range tests {
		if got := ModuleCompression(tt.config); got != tt.want {
			t.Errorf("%s: ModuleCompression = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestCompressModules checks that a zstd cell's file is the signed module
// compressed, in place of it, the same bytes each time, and that plain
// cells and unknown compressions are handled as said.
func TestCompressModules(t *testing.T) {
	dir := t.TempDir()
	ko := filepath.Join(dir, "m.ko")
	plain := append([]byte("\x7fELF"), bytes.Repeat([]byte("module body "), 1000)...)
	write := func() {
		if err := os.WriteFile(ko, plain, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write()
	got, err := compressModules([]string{ko}, CompressionNone)
	if err != nil || len(got) != 1 || got[0] != ko {
		t.Fatalf("compressModules(none) = %q, %v; want the file as it is", got, err)
	}
	var first []byte
	for range 2 {
		write()
		got, err = compressModules([]string{ko}, CompressionZstd)
		if err != nil || len(got) != 1 || got[0] != ko+".zst" {
			t.Fatalf("compressModules(zstd) = %q, %v; want %s.zst", got, err, ko)
		}
		if _, err := os.Stat(ko); !os.IsNotExist(err) {
			t.Errorf("%s still there after compression (stat: %v), want it replaced", ko, err)
		}
		data, err := os.ReadFile(got[0])
		if err != nil {
			t.Fatal(err)
		}
		elf, comp, err := modinfo.Decompress(got[0], data)
		if err != nil || comp != "zstd" || !bytes.Equal(elf, plain) {
			t.Fatalf("%s decompresses to %d bytes (%q, %v), want the %d plain bytes as zstd", got[0], len(elf), comp, err, len(plain))
		}
		if first != nil && !bytes.Equal(first, data) {
			t.Errorf("two compressions of one module differ: a cell's key must give the same bytes")
		}
		first = data
	}
	for _, tc := range []struct{ name, file, compression string }{
		{"unknown compression", ko, "xz"},
		{"a module dkms compressed", ko + ".xz", CompressionZstd},
		{"a module dkms compressed, plain cells", ko + ".xz", CompressionNone},
	} {
		if _, err := compressModules([]string{tc.file}, tc.compression); err == nil {
			t.Errorf("%s: compressModules(%s, %s) = nil error, want a refusal", tc.name, tc.file, tc.compression)
		}
	}
}
