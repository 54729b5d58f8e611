package fsverity

import (
	"bytes"
	"crypto/sha256"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"
)

// TestDigestMatchesFsverityTool compares Digest with fsverity-utils'
// "fsverity digest" (Debian's fsverity package, which computes it in
// userspace, no kernel support needed) at the sizes where the tree changes
// shape: empty, one partial block, one block, two, a full level-1 block
// (128 data blocks) and one more, and a three-level tree.
func TestDigestMatchesFsverityTool(t *testing.T) {
	tool, err := exec.LookPath("fsverity")
	if err != nil {
		t.Fatalf("fsverity (Debian package fsverity) is not installed: scripts/deps.sh installs it: %v", err)
	}
	sizes := []int{0, 1, 4095, 4096, 4097, 2 * 4096, 128 * 4096, 128*4096 + 1, 129 * 4096}
	if !testing.Short() {
		sizes = append(sizes, 128*128*4096+5) // three levels, 64 MiB
	}
	rng := rand.New(rand.NewSource(1))
	dir := t.TempDir()
	for _, n := range sizes {
		data := make([]byte, n)
		rng.Read(data)
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(tool, "digest", "--hash-alg=sha256", "--block-size=4096", p).CombinedOutput()
		if err != nil {
			t.Fatalf("fsverity digest (%d bytes): %v: %s", n, err, out)
		}
		want := strings.Fields(string(out))[0]
		got, err := Digest(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("Digest of %d bytes = %s, want %s (fsverity digest)", n, got, want)
		}
		if !Valid(got) {
			t.Errorf("Valid(%q) = false", got)
		}
	}
}

func TestValid(t *testing.T) {
	good := Prefix + strings.Repeat("0a", 32)
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{good, true},
		{"", false},
		{strings.Repeat("0a", 32), false},
		{"sha512:" + strings.Repeat("0a", 32), false},
		{Prefix + strings.Repeat("0A", 32), false},
		{good[:len(good)-1], false},
		{good + "0", false},
	} {
		if got := Valid(tc.in); got != tc.want {
			t.Errorf("Valid(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestDescriptorLayout pins the structures the kernel reads to their sizes
// in <linux/fsverity.h>.
func TestDescriptorLayout(t *testing.T) {
	if got, want := unsafe.Sizeof(EnableArg{}), uintptr(128); got != want {
		t.Errorf("sizeof(EnableArg) = %d, want %d (struct fsverity_enable_arg)", got, want)
	}
	if got, want := unsafe.Sizeof(measureBuf{}), uintptr(4+64); got != want {
		t.Errorf("sizeof(measureBuf) = %d, want %d", got, want)
	}
	// An empty file: root hash zero, size zero.
	var zero [sha256.Size]byte
	got, err := Digest(bytes.NewReader(nil))
	if err != nil {
		t.Fatal(err)
	}
	if want := Format(descriptorDigest(zero, 0)); got != want {
		t.Errorf("Digest(empty) = %s, want %s", got, want)
	}
}

// TestMeasureWithoutVerity: a file in the test's temporary directory has no
// fs-verity (tmpfs and most build hosts' filesystems have none, and no file
// there has it enabled), which Measure reports as absent, not as a failure.
func TestMeasureWithoutVerity(t *testing.T) {
	p := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(p, []byte("module"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := Measure(int(f.Fd()))
	if err == nil || !Absent(err) {
		t.Fatalf("Measure(plain file) = %q, %v; want an error Absent accepts", d, err)
	}
}

// TestHashWritesInPieces: the digest does not depend on how the data is cut
// into writes, and Sum leaves the Hash as it was.
func TestHashWritesInPieces(t *testing.T) {
	data := make([]byte, 3*4096+100)
	rand.New(rand.NewSource(2)).Read(data)
	want, err := Digest(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []int{1, 7, 4096, 5000} {
		var h Hash
		for off := 0; off < len(data); off += step {
			h.Write(data[off:min(off+step, len(data))])
			_ = h.Sum()
		}
		if got := h.Sum(); got != want {
			t.Errorf("writes of %d bytes: Sum = %s, want %s", step, got, want)
		}
	}
}
