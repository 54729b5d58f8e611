package archive

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// requireTool fails the test loudly when a real tool the test relies on is missing.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is required by this test but not in PATH (%v): install it with scripts/deps.sh", name, err)
	}
	return p
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// run runs a command, failing the test with its output on error.
func run(t *testing.T, dir string, stdin []byte, name string, args ...string) (stdout, stderr []byte) {
	t.Helper()
	requireTool(t, name)
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\nstderr: %s", name, args, err, e.Bytes())
	}
	return o.Bytes(), e.Bytes()
}

// decompress checks a compressed archive with the real tool's -t and returns the
// plain cpio stream, decompressed by the real tool.
func decompress(t *testing.T, data []byte, c Compression) []byte {
	t.Helper()
	if c == None {
		return data
	}
	tool := map[Compression]string{Zstd: "zstd", LZ4: "lz4", Gzip: "gzip"}[c]
	f := filepath.Join(t.TempDir(), "initrd"+c.Ext())
	if err := os.WriteFile(f, data, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, "", nil, tool, "-t", f)
	out, _ := run(t, "", nil, tool, "-d", "-c", f)
	return out
}

// extract unpacks a plain cpio stream with GNU cpio into a new directory and
// returns it with cpio's verbose listing.
func extract(t *testing.T, raw []byte) (dir string, listing string) {
	t.Helper()
	dir = t.TempDir()
	_, stderr := run(t, dir, raw, "cpio", "-idmv", "--no-absolute-filenames", "--quiet")
	return dir, string(stderr)
}

// pseudoRandom returns n reproducible bytes mixing noise and repetition, so that
// compressors find matches at several distances.
func pseudoRandom(n int) []byte {
	r := rand.New(rand.NewSource(42))
	b := make([]byte, n)
	for i := 0; i < n; {
		if r.Intn(2) == 0 && i > 4096 {
			off := 1 + r.Intn(4096)
			l := min(64+r.Intn(512), n-i)
			for j := 0; j < l; j++ {
				b[i+j] = b[i+j-off]
			}
			i += l
			continue
		}
		b[i] = byte(r.Intn(256))
		i++
	}
	return b
}

// fixture is one step of building the test archive.
type fixture struct {
	desc string
	add  func(a *Archive) error
}

// fixtureSteps returns the steps of a representative initramfs, including a file
// read from disk (written into dir) larger than one zstd block.
func fixtureSteps(t *testing.T, dir string) []fixture {
	t.Helper()
	big := filepath.Join(dir, "big.bin")
	if err := os.WriteFile(big, pseudoRandom(700<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	return []fixture{
		{"init", func(a *Archive) error { return a.AddFile("init", 0o755, []byte("#!/fake/init\n")) }},
		{"dev", func(a *Archive) error { return a.AddDir("dev", 0o755) }},
		{"usr/bin/sgid", func(a *Archive) error { return a.AddFile("usr/bin/sgid", 0o2711, []byte("g")) }},
		{"etc/kpreload/boot.yaml", func(a *Archive) error {
			return a.AddFile("etc/kpreload/boot.yaml", 0o644, []byte("driver: nvidia-535\n"))
		}},
		{"usr/bin", func(a *Archive) error { return a.AddDir("usr/bin", 0o755) }},
		{"usr/bin/tool", func(a *Archive) error { return a.AddFile("usr/bin/tool", 0o755, []byte("tool")) }},
		{"bin", func(a *Archive) error { return a.AddSymlink("bin", "usr/bin") }},
		{"lib64", func(a *Archive) error { return a.AddSymlink("lib64", "lib") }},
		{"lib/modules/k/big.bin", func(a *Archive) error { return a.AddFileFrom("lib/modules/k/big.bin", 0o644, big) }},
		{"lib/modules/k/tools", func(a *Archive) error { return a.AddSymlink("lib/modules/k/tools", "../../../usr/bin") }},
		{"sbin/suid", func(a *Archive) error { return a.AddFile("sbin/suid", 0o4755, []byte{}) }},
		{"tmp", func(a *Archive) error { return a.AddDir("tmp", fs.ModeSticky|0o777) }},
	}
}

// build applies steps in the given order.
func build(t *testing.T, steps []fixture, order []int) *Archive {
	t.Helper()
	a := New()
	for _, i := range order {
		if err := steps[i].add(a); err != nil {
			t.Fatalf("add %s: %v", steps[i].desc, err)
		}
	}
	return a
}

func encode(t *testing.T, a *Archive, c Compression) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := a.Encode(&buf, c)
	if err != nil {
		t.Fatalf("Encode(%s): %v", c, err)
	}
	if n != int64(buf.Len()) {
		t.Errorf("Encode(%s) = %d bytes, but %d were written", c, n, buf.Len())
	}
	return buf.Bytes()
}
