package archive

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cavaliergopher/cpio"
)

var update = flag.Bool("update", false, "rewrite testdata/golden.cpio")

var compressions = []Compression{Zstd, LZ4, Gzip, None}

func TestEncodeDeterministic(t *testing.T) {
	steps := fixtureSteps(t, t.TempDir())
	inOrder := make([]int, len(steps))
	reversed := make([]int, len(steps))
	for i := range steps {
		inOrder[i] = i
		reversed[len(steps)-1-i] = i
	}
	shuffled := []int{9, 3, 11, 0, 5, 8, 1, 10, 4, 7, 2, 6}
	for _, c := range compressions {
		t.Run(string(c), func(t *testing.T) {
			a := build(t, steps, inOrder)
			first := encode(t, a, c)
			again := encode(t, a, c)
			if !bytes.Equal(first, again) {
				t.Errorf("two Encode(%s) of one archive differ: sha256 %s vs %s", c, sum(first), sum(again))
			}
			for name, order := range map[string][]int{"reversed": reversed, "shuffled": shuffled} {
				other := encode(t, build(t, steps, order), c)
				if !bytes.Equal(first, other) {
					t.Errorf("Encode(%s) of the archive built in %s order: sha256 %s, want %s (as built in order)", c, name, sum(other), sum(first))
				}
			}
			t.Logf("%s: %d bytes, sha256 %s", c, len(first), sum(first))
		})
	}
}

// TestEncodeRealTools checks every compression with the real zstd/lz4/gzip (-t and -d)
// and GNU cpio, which must reproduce files, modes (setuid, setgid and sticky
// included), symlinks, owners and mtimes.
func TestEncodeRealTools(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatalf("this test checks that cpio extracts files owned by 0:0 with their setuid and setgid bits, which only root can do: run it as root")
	}
	srcDir := t.TempDir()
	steps := fixtureSteps(t, srcDir)
	order := make([]int, len(steps))
	for i := range order {
		order[i] = i
	}
	bigWant, err := os.ReadFile(filepath.Join(srcDir, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		mode   fs.FileMode
		data   []byte
		target string
	}
	wants := map[string]want{
		"init":                   {mode: 0o755, data: []byte("#!/fake/init\n")},
		"dev":                    {mode: fs.ModeDir | 0o755},
		"etc":                    {mode: fs.ModeDir | 0o755},
		"etc/kpreload":           {mode: fs.ModeDir | 0o755},
		"etc/kpreload/boot.yaml": {mode: 0o644, data: []byte("driver: nvidia-535\n")},
		"usr":                    {mode: fs.ModeDir | 0o755},
		"usr/bin":                {mode: fs.ModeDir | 0o755},
		"usr/bin/tool":           {mode: 0o755, data: []byte("tool")},
		"usr/bin/sgid":           {mode: fs.ModeSetgid | 0o711, data: []byte("g")},
		"bin":                    {mode: fs.ModeSymlink | 0o777, target: "usr/bin"},
		"lib64":                  {mode: fs.ModeSymlink | 0o777, target: "lib"},
		"lib":                    {mode: fs.ModeDir | 0o755},
		"lib/modules":            {mode: fs.ModeDir | 0o755},
		"lib/modules/k":          {mode: fs.ModeDir | 0o755},
		"lib/modules/k/big.bin":  {mode: 0o644, data: bigWant},
		"lib/modules/k/tools":    {mode: fs.ModeSymlink | 0o777, target: "../../../usr/bin"},
		"sbin":                   {mode: fs.ModeDir | 0o755},
		"sbin/suid":              {mode: fs.ModeSetuid | 0o755, data: []byte{}},
		"tmp":                    {mode: fs.ModeDir | fs.ModeSticky | 0o777},
	}
	const epoch = 1700000000
	for _, c := range compressions {
		t.Run(string(c), func(t *testing.T) {
			a := build(t, steps, order)
			if err := a.SetModTime(time.Unix(epoch, 0)); err != nil {
				t.Fatal(err)
			}
			raw := decompress(t, encode(t, a, c), c)
			dir, listing := extract(t, raw)
			var got []string
			err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err != nil || p == dir {
					return err
				}
				rel, _ := filepath.Rel(dir, p)
				got = append(got, rel)
				w, ok := wants[rel]
				if !ok {
					t.Errorf("cpio extracted %q, which is not in the archive", rel)
					return nil
				}
				fi, err := os.Lstat(p)
				if err != nil {
					return err
				}
				if fi.Mode() != w.mode {
					t.Errorf("extracted %q has mode %v, want %v", rel, fi.Mode(), w.mode)
				}
				st := fi.Sys().(*syscall.Stat_t)
				if st.Uid != 0 || st.Gid != 0 {
					t.Errorf("extracted %q is owned by %d:%d, want 0:0", rel, st.Uid, st.Gid)
				}
				// GNU cpio 2.13 sets a directory's mtime before extracting its
				// contents, which then change it: check regular files only.
				if fi.Mode().IsRegular() && fi.ModTime().Unix() != epoch {
					t.Errorf("extracted %q has mtime %d, want %d", rel, fi.ModTime().Unix(), epoch)
				}
				switch {
				case w.target != "":
					if tgt, err := os.Readlink(p); err != nil || tgt != w.target {
						t.Errorf("extracted symlink %q -> %q (%v), want -> %q", rel, tgt, err, w.target)
					}
				case w.data != nil:
					b, err := os.ReadFile(p)
					if err != nil {
						return err
					}
					if !bytes.Equal(b, w.data) {
						t.Errorf("extracted %q: %d bytes sha256 %s, want %d bytes sha256 %s", rel, len(b), sum(b), len(w.data), sum(w.data))
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(wants) {
				t.Errorf("cpio extracted %d entries %q, want %d", len(got), got, len(wants))
			}
			if strings.Contains(listing, "warning") || strings.Contains(listing, "junk") {
				t.Errorf("cpio complained while extracting:\n%s", listing)
			}
		})
	}
}

// TestEncodeHeaders parses the plain stream with an independent newc reader
// (github.com/cavaliergopher/cpio) and checks the fields kpreload promises.
func TestEncodeHeaders(t *testing.T) {
	steps := fixtureSteps(t, t.TempDir())
	order := make([]int, len(steps))
	for i := range order {
		order[i] = i
	}
	a := build(t, steps, order)
	const epoch = 1234567890
	if err := a.SetModTime(time.Unix(epoch, 0)); err != nil {
		t.Fatal(err)
	}
	raw := encode(t, a, None)
	if !bytes.HasPrefix(raw, []byte("070701")) {
		t.Fatalf("stream starts with %q, want the newc magic 070701", raw[:6])
	}
	if len(raw)%4 != 0 {
		t.Errorf("stream is %d bytes, want a multiple of 4", len(raw))
	}
	trailer := []byte("TRAILER!!!\x00")
	if i := bytes.LastIndex(raw, trailer); i < 0 || len(raw)-(i+len(trailer)) > 3 {
		t.Errorf("stream does not end with the TRAILER!!! record (last at %d of %d)", i, len(raw))
	}

	entries := a.Entries()
	r := cpio.NewReader(bytes.NewReader(raw))
	for i := 0; ; i++ {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			if i != len(entries) {
				t.Errorf("stream has %d entries, want %d", i, len(entries))
			}
			break
		}
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if i >= len(entries) {
			t.Fatalf("stream has entry %q beyond the %d expected", h.Name, len(entries))
		}
		e := entries[i]
		if h.Name != e.Name {
			t.Errorf("entry %d is %q, want %q", i, h.Name, e.Name)
		}
		if h.Inode != int64(i+1) {
			t.Errorf("entry %q has inode %d, want %d", h.Name, h.Inode, i+1)
		}
		wantLinks := 1
		if e.Mode.IsDir() {
			wantLinks = 2
		}
		if h.Links != wantLinks || h.Uid != 0 || h.Guid != 0 || h.ModTime.Unix() != epoch {
			t.Errorf("entry %q: nlink %d uid %d gid %d mtime %d, want %d 0 0 %d", h.Name, h.Links, h.Uid, h.Guid, h.ModTime.Unix(), wantLinks, epoch)
		}
		if got := h.FileInfo().Mode(); got != e.Mode {
			t.Errorf("entry %q has mode %v, want %v", h.Name, got, e.Mode)
		}
		if got, want := uint32(h.Mode)&syscall.S_IFMT, sIFMT(e.Mode); got != want {
			t.Errorf("entry %q has file type %#o, want %#o", h.Name, got, want)
		}
		if h.Linkname != e.Target {
			t.Errorf("entry %q links to %q, want %q", h.Name, h.Linkname, e.Target)
		}
		if e.Mode.IsRegular() && h.Size != e.Size {
			t.Errorf("entry %q has size %d, want %d", h.Name, h.Size, e.Size)
		}
	}

	// The Reader accepts the CRC variant too and skips the device fields: walk
	// the raw headers for the magic, devmajor..rdevminor and check.
	for off, n := 0, 0; off < len(raw); n++ {
		if off+110 > len(raw) {
			t.Fatalf("header %d at offset %d runs past the end (%d bytes)", n, off, len(raw))
		}
		hdr := string(raw[off : off+110])
		if hdr[:6] != "070701" {
			t.Errorf("header %d at offset %d has magic %q, want 070701", n, off, hdr[:6])
		}
		if got := hdr[62:94]; got != strings.Repeat("0", 32) {
			t.Errorf("header %d at offset %d has device fields %q, want all 0", n, off, got)
		}
		if got := hdr[102:110]; got != "00000000" {
			t.Errorf("header %d at offset %d has check %q, want 00000000", n, off, got)
		}
		size, err1 := strconv.ParseUint(hdr[54:62], 16, 32)
		nameSize, err2 := strconv.ParseUint(hdr[94:102], 16, 32)
		if err1 != nil || err2 != nil {
			t.Fatalf("header %d at offset %d: bad size fields %q %q", n, off, hdr[54:62], hdr[94:102])
		}
		if nameSize == 0 || off+110+int(nameSize) > len(raw) {
			t.Fatalf("header %d at offset %d: name size %d runs past the end (%d bytes)", n, off, nameSize, len(raw))
		}
		name := string(raw[off+110 : off+110+int(nameSize)-1])
		off = align4(align4(off+110+int(nameSize)) + int(size))
		if name == "TRAILER!!!" {
			if off != len(raw) {
				t.Errorf("trailer ends at %d, want the end of the stream (%d)", off, len(raw))
			}
			if n != len(entries) {
				t.Errorf("trailer is header %d, want %d", n, len(entries))
			}
			break
		}
	}
}

func align4(n int) int { return (n + 3) &^ 3 }

// sIFMT returns the st_mode file type <sys/stat.h> gives for m.
func sIFMT(m fs.FileMode) uint32 {
	switch {
	case m.IsDir():
		return syscall.S_IFDIR
	case m&fs.ModeSymlink != 0:
		return syscall.S_IFLNK
	}
	return syscall.S_IFREG
}

// TestZstdFrame checks the zstd frame the real zstd tool sees: one frame, a
// checksum, and a window no larger than ZstdWindowSize.
func TestZstdFrame(t *testing.T) {
	steps := fixtureSteps(t, t.TempDir())
	order := make([]int, len(steps))
	for i := range order {
		order[i] = i
	}
	data := encode(t, build(t, steps, order), Zstd)
	f := filepath.Join(t.TempDir(), "initrd.zst")
	if err := os.WriteFile(f, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := run(t, "", nil, "zstd", "-lv", f)
	text := string(out)
	for _, want := range []string{"# Zstandard Frames: 1", "Check: XXH64"} {
		if !strings.Contains(text, want) {
			t.Errorf("zstd -lv output lacks %q:\n%s", want, text)
		}
	}
	m := regexp.MustCompile(`Window Size: ([0-9.]+) (KiB|MiB)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("zstd -lv output has no window size:\n%s", text)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	size := v * 1024
	if m[2] == "MiB" {
		size *= 1024
	}
	if size > ZstdWindowSize || size < 1<<20 {
		t.Errorf("zstd window = %s %s, want at most %d bytes (and a real window, not a single-segment frame)", m[1], m[2], ZstdWindowSize)
	}
	t.Logf("zstd -lv: window %s %s", m[1], m[2])
}

// TestGolden pins the exact bytes of a small uncompressed archive, and that its
// init is a 0755 regular file at the root. Rewrite with go test -run Golden -update.
func TestGolden(t *testing.T) {
	a := New()
	for _, err := range []error{
		a.AddFile("init", 0o755, []byte("init\n")),
		a.AddDir("dev", 0o755),
		a.AddSymlink("bin", "usr/bin"),
		a.AddFile("usr/bin/x", 0o644, []byte("abc")),
		a.AddDir("run", 0o755),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	raw := encode(t, a, None)
	golden := filepath.Join("testdata", "golden.cpio")
	if *update {
		if err := os.WriteFile(golden, raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (create it with go test -run Golden -update)", err)
	}
	if !bytes.Equal(raw, want) {
		t.Errorf("archive bytes changed: sha256 %s, want %s (testdata/golden.cpio)\ngot:\n%q", sum(raw), sum(want), raw)
	}

	r := cpio.NewReader(bytes.NewReader(raw))
	var found bool
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "init" {
			found = true
			if h.Mode != cpio.TypeReg|0o755 {
				t.Errorf("init has mode %o, want %o", uint32(h.Mode), uint32(cpio.TypeReg|0o755))
			}
		}
	}
	if !found {
		t.Errorf("golden archive has no init entry")
	}
}

func TestWriteFile(t *testing.T) {
	a := New()
	if err := a.AddFile("init", 0o755, []byte("x")); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "initrd.img")
	if err := a.WriteFile(p, Gzip); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := encode(t, a, Gzip); !bytes.Equal(got, want) {
		t.Errorf("WriteFile wrote sha256 %s, want %s as Encode", sum(got), sum(want))
	}
	// Gzip header: no name flag, mtime 0.
	if got[3] != 0 || !bytes.Equal(got[4:8], []byte{0, 0, 0, 0}) {
		t.Errorf("gzip header flags %#x mtime % x, want 0 and 00 00 00 00", got[3], got[4:8])
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("WriteFile left %d files in the directory, want 1", len(ents))
	}
}

func TestEncodeSourceChanged(t *testing.T) {
	src := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(src, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := New()
	if err := a.AddFileFrom("f", 0o644, src); err != nil {
		t.Fatal(err)
	}
	for _, content := range []string{"123", "1234567"} {
		if err := os.WriteFile(src, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := a.Encode(io.Discard, None)
		if err == nil || !strings.Contains(err.Error(), "changed size") {
			t.Errorf("Encode after %s became %d bytes: err = %v, want a changed-size error", src, len(content), err)
		}
	}
}
