package modinfo

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// fuzzName labels every fuzzed input; errors must mention it.
const fuzzName = "fuzz/input.ko"

// FuzzParse checks that Parse never panics and that every error names the
// input. Seeds: a small real module (signed and stripped) and a few
// hand-made byte strings.
func FuzzParse(f *testing.F) {
	kver := plainKernel(f)
	real, err := os.ReadFile(findModule(f, kver, "kernel/lib/crc7"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(real)
	f.Add(stripSignature(f, real))
	f.Add(real[:64])
	f.Add([]byte{})
	f.Add([]byte("\x7fELF"))
	f.Add([]byte("\x7fELF\x02\x01\x01\x00"))
	f.Add([]byte("\x7fELF\x01\x01\x01\x00~Module signature appended~\n"))
	f.Add([]byte("license=GPL\x00name=x\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := Parse(fuzzName, data)
		if err != nil {
			if !strings.Contains(err.Error(), fuzzName) {
				t.Fatalf("Parse(%q) error %q does not name the input", fuzzName, err)
			}
			if info != nil {
				t.Fatalf("Parse(%q) returned both %+v and error %v", fuzzName, info, err)
			}
			return
		}
		if info == nil || info.File != fuzzName || info.Size != int64(len(data)) || info.Fields == nil {
			t.Fatalf("Parse(%q) = %+v, nil: want File, Size and Fields set", fuzzName, info)
		}
		if info.Signed != bytes.HasSuffix(data, []byte(SignatureMagic)) {
			t.Fatalf("Parse(%q) Signed = %v for an image whose tail is %q", fuzzName, info.Signed, head(data[max(0, len(data)-28):], 28))
		}
	})
}

// FuzzDecompress checks that Decompress never panics, that every error names
// the input and that a success is an ELF image. Seeds: a small real module
// plain and compressed with the real xz, zstd and gzip.
func FuzzDecompress(f *testing.F) {
	kver := plainKernel(f)
	src := findModule(f, kver, "kernel/lib/crc7")
	real, err := os.ReadFile(src)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(real)
	f.Add(run(f, "xz", "--check=crc32", "--lzma2=dict=1MiB", "-c", src))
	f.Add(run(f, "zstd", "-q", "-c", src))
	f.Add(run(f, "gzip", "-c", src))
	f.Add([]byte{0xfd, '7', 'z', 'X', 'Z', 0})
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd})
	f.Add([]byte{0x1f, 0x8b})
	f.Fuzz(func(t *testing.T, data []byte) {
		image, _, err := Decompress(fuzzName, data)
		if err != nil {
			if !strings.Contains(err.Error(), fuzzName) {
				t.Fatalf("Decompress(%q) error %q does not name the input", fuzzName, err)
			}
			return
		}
		if !bytes.HasPrefix(image, magicELF) || len(image) > MaxImageSize {
			t.Fatalf("Decompress(%q) = %d bytes starting % x: want an ELF image", fuzzName, len(image), head(image, 8))
		}
	})
}
