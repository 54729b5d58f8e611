package testenv

import (
	"io"
	"os"
	"testing"

	"github.com/cavaliergopher/cpio"
	"github.com/klauspost/compress/zstd"
)

// InitramfsFiles reads a zstd-compressed newc initramfs into name -> content
// (regular files only).
func InitramfsFiles(t testing.TB, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := zstd.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	r := cpio.NewReader(zr)
	out := map[string]string{}
	for {
		h, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		if h.Mode.IsRegular() {
			b, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			out[h.Name] = string(b)
		}
	}
	return out
}
