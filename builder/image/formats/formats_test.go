package formats

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/image/disk"
	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/internal/runner"
)

func TestCheckFormats(t *testing.T) {
	for _, c := range []struct {
		names []string
		want  []string // substrings of the error; none: no error
	}{
		{nil, nil},
		{[]string{"raw", "qcow2", "vhd", "vmdk", "gce"}, nil},
		{[]string{"vpc"}, []string{`format "vpc": want one of raw, qcow2, vhd, vmdk, gce`}},
		{[]string{"raw", "VMDK", "raw"}, []string{`format "VMDK"`, "format raw given twice"}},
	} {
		err := Check(c.names)
		if len(c.want) == 0 {
			if err != nil {
				t.Errorf("Check(%q) = %v, want nil", c.names, err)
			}
			continue
		}
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("Check(%q) = %v, want an error containing %q", c.names, err, w)
			}
		}
	}
}

func TestFormatFiles(t *testing.T) {
	for _, c := range []struct {
		format, file, qemu string
	}{
		{Raw, "ci.raw", "raw"},
		{QCOW2, "ci.qcow2", "qcow2"},
		{VHD, "ci.vhd", "vpc"},
		{VMDK, "ci.vmdk", "vmdk"},
		{GCE, "ci.tar.gz", ""},
		{"manifest.json", "ci.manifest.json", ""},
	} {
		if got := File("ci", c.format); got != c.file {
			t.Errorf("File(ci, %s) = %q, want %q", c.format, got, c.file)
		}
		got, ok := QEMU(c.format)
		if got != c.qemu || ok != (c.qemu != "") {
			t.Errorf("QEMU(%s) = %q, %v, want %q, %v", c.format, got, ok, c.qemu, c.qemu != "")
		}
	}
	for _, c := range []struct {
		bl   install.Bootloader
		want []string
	}{
		{install.SystemdBoot, []string{"uefi"}},
		{install.GRUB, []string{"bios", "uefi"}},
	} {
		if got := BootFirmware(c.bl); !slices.Equal(got, c.want) {
			t.Errorf("BootFirmware(%s) = %q, want %q", c.bl, got, c.want)
		}
	}
}

// qemuImgInfo is what the tests read of qemu-img info --output=json.
type qemuImgInfo struct {
	Format         string `json:"format"`
	VirtualSize    int64  `json:"virtual-size"`
	FormatSpecific struct {
		Type string `json:"type"`
		Data struct {
			CreateType string `json:"create-type"`
		} `json:"data"`
	} `json:"format-specific"`
}

// TestWriteFormats makes small GPT disks (the image's own layout and sfdisk
// script) with data in their partitions, writes each in every format as
// Build does, and checks every file with qemu-img and GNU tar: QEMU reads
// the same disk back from the qemu-img formats (qemu-img compare), the VHD is
// fixed with a whole-MiB virtual size, the VMDK streamOptimized, and the GCE
// tarball holds only a sparse disk.raw of whole GiB with a valid GPT.
func TestWriteFormats(t *testing.T) {
	for _, tool := range []string{"qemu-img", "sfdisk", "tar", "cp"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing (scripts/deps.sh installs it): %v", tool, err)
		}
	}
	ctx := context.Background()
	for _, dc := range []struct {
		name    string
		size    int64 // bytes
		vhdSize int64 // the VHD's virtual size
		gceSize int64 // disk.raw's size in the GCE tarball
	}{
		{"6 MiB", 6 * disk.MiB, 6 * disk.MiB, disk.GiB},
		{"6 MiB + 64 KiB", 6*disk.MiB + 64<<10, 7 * disk.MiB, disk.GiB}, // not a whole MiB: the VHD's copy grows
		{"1 GiB", disk.GiB, disk.GiB, disk.GiB},                         // whole GiB: disk.raw is a link to the raw disk
	} {
		dir := t.TempDir()
		raw := filepath.Join(dir, "t.raw")
		l := makeGPTDisk(t, raw, dc.size)
		for _, c := range []struct {
			format  string
			file    string
			virtual int64
			check   func(t *testing.T, path string)
		}{
			{Raw, "t.raw", dc.size, nil},
			{QCOW2, "t.qcow2", dc.size, func(t *testing.T, p string) {
				info := imgInfo(t, "qcow2", p)
				if info.FormatSpecific.Type != "qcow2" {
					t.Errorf("format-specific type %q, want qcow2", info.FormatSpecific.Type)
				}
			}},
			{VHD, "t.vhd", dc.vhdSize, func(t *testing.T, p string) {
				info := imgInfo(t, "vpc", p)
				if info.VirtualSize%disk.MiB != 0 {
					t.Errorf("virtual size %d: want a whole number of MiB (Azure)", info.VirtualSize)
				}
				checkVHDFooter(t, p, info.VirtualSize)
			}},
			{VMDK, "t.vmdk", dc.size, func(t *testing.T, p string) {
				info := imgInfo(t, "vmdk", p)
				if got := info.FormatSpecific.Data.CreateType; got != "streamOptimized" {
					t.Errorf("vmdk create-type %q, want streamOptimized", got)
				}
			}},
			{GCE, "t.tar.gz", dc.gceSize, func(t *testing.T, p string) {
				checkGCETarball(t, p, raw, l, dc.gceSize)
			}},
		} {
			t.Run(dc.name+"/"+c.format, func(t *testing.T) {
				var msgs []string
				p, virtual, err := Write(ctx, hostTools, raw, c.format, dir, "t", func(m string) { msgs = append(msgs, m) })
				if err != nil {
					t.Fatalf("Write: %v", err)
				}
				if want := filepath.Join(dir, c.file); p != want {
					t.Errorf("file %s, want %s", p, want)
				}
				if virtual != c.virtual {
					t.Errorf("virtual size %d, want %d", virtual, c.virtual)
				}
				if c.format != Raw && len(msgs) == 0 {
					t.Error("no progress lines")
				}
				if q, ok := QEMU(c.format); ok {
					info := imgInfo(t, q, p)
					if info.Format != q || info.VirtualSize != c.virtual {
						t.Errorf("qemu-img info: format %q, virtual size %d; want %q, %d", info.Format, info.VirtualSize, q, c.virtual)
					}
					// The same disk, byte for byte (any grown tail reads as zeros).
					if c.virtual == dc.size {
						if out, err := exec.Command("qemu-img", "compare", "-q", "-f", "raw", "-F", q, raw, p).CombinedOutput(); err != nil {
							t.Errorf("qemu-img compare raw %s: %v %s", c.format, err, out)
						}
					} else {
						if out, err := exec.Command("qemu-img", "compare", "-q", "-f", "raw", "-F", q, raw, p).CombinedOutput(); err == nil {
							t.Errorf("qemu-img compare of the grown %s reports the same disk: %s", c.format, out)
						}
						checkGrownGPT(t, q, p, c.virtual)
					}
				}
				if c.check != nil {
					c.check(t, p)
				}
				if ents, _ := filepath.Glob(filepath.Join(dir, ".scratch-*")); len(ents) != 0 {
					t.Errorf("scratch directories left behind: %q", ents)
				}
			})
		}
		if st, err := os.Stat(raw); err != nil || st.Size() != dc.size {
			t.Errorf("raw disk after the conversions: %v (err %v), want it unchanged at %d bytes", st, err, dc.size)
		}
	}
}

// makeGPTDisk writes a sparse GPT disk of size bytes at path with the
// image's layout (a small ESP and a root partition, 1 MiB at each end) and
// some random data at the start of each partition.
func makeGPTDisk(t *testing.T, path string, size int64) disk.Layout {
	t.Helper()
	l, err := disk.NewLayout(int(size/disk.MiB), 2, disk.NewUUID(), disk.NewUUID(), disk.NewUUID())
	if err != nil {
		t.Fatal(err)
	}
	l.DiskSize = size
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
	sf := exec.Command("sfdisk", "--quiet", "--no-reread", "--no-tell-kernel", path)
	sf.Stdin = strings.NewReader(l.SfdiskScript())
	if out, err := sf.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v: %s", err, out)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range []disk.Partition{l.ESP, l.Root} {
		b := make([]byte, 300<<10)
		rand.Read(b)
		if _, err := f.WriteAt(b, p.Offset); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// imgInfo runs qemu-img info with the format given (QEMU does not probe a
// fixed VHD: its footer is at the end).
func imgInfo(t *testing.T, format, path string) qemuImgInfo {
	t.Helper()
	out, err := exec.Command("qemu-img", "info", "-f", format, "--output=json", path).Output()
	if err != nil {
		t.Fatalf("qemu-img info -f %s %s: %v", format, path, err)
	}
	var info qemuImgInfo
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatalf("qemu-img info: %v: %s", err, out)
	}
	return info
}

// checkVHDFooter checks a fixed VHD: the disk followed by one 512-byte footer
// ("conectix", disk type 2 = fixed, current size the virtual size).
func checkVHDFooter(t *testing.T, path string, virtual int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.Size(), virtual+512; got != want {
		t.Errorf("VHD file size %d, want the virtual size + a 512-byte footer = %d", got, want)
		return
	}
	footer := make([]byte, 512)
	if _, err := f.ReadAt(footer, virtual); err != nil {
		t.Fatal(err)
	}
	if cookie := string(footer[:8]); cookie != "conectix" {
		t.Errorf("VHD footer cookie %q, want conectix", cookie)
	}
	if typ := binary.BigEndian.Uint32(footer[60:]); typ != 2 {
		t.Errorf("VHD disk type %d, want 2 (fixed)", typ)
	}
	if cur := int64(binary.BigEndian.Uint64(footer[48:])); cur != virtual {
		t.Errorf("VHD footer current size %d, want %d", cur, virtual)
	}
}

// checkGrownGPT converts a grown disk back to raw and checks its GPT with
// sfdisk --verify: the backup GPT and the protective MBR moved to the new end.
func checkGrownGPT(t *testing.T, format, path string, size int64) {
	t.Helper()
	back := filepath.Join(t.TempDir(), "back.raw")
	if out, err := exec.Command("qemu-img", "convert", "-f", format, "-O", "raw", path, back).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img convert back to raw: %v: %s", err, out)
	}
	verifyGPT(t, back, size)
}

// verifyGPT runs sfdisk --verify on a raw disk of size bytes.
func verifyGPT(t *testing.T, path string, size int64) {
	t.Helper()
	if st, err := os.Stat(path); err != nil || st.Size() != size {
		t.Errorf("disk %s: %v (err %v), want %d bytes", path, st, err, size)
	}
	out, err := exec.Command("sfdisk", "--verify", path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "No errors detected") || strings.Contains(string(out), "mismatch") {
		t.Errorf("sfdisk --verify of the grown disk: %v:\n%s", err, out)
	}
}

// checkGCETarball checks GCE's import format: a gzip'd GNU tar holding one
// sparse member disk.raw of size bytes whose partitions are raw's and whose
// GPT is valid at that size.
func checkGCETarball(t *testing.T, path, raw string, l disk.Layout, size int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s is not gzip'd: %v", path, err)
	}
	// The first header, as written: GNU magic and the sparse type flag 'S'.
	var hdr [512]byte
	if _, err := io.ReadFull(z, hdr[:]); err != nil {
		t.Fatal(err)
	}
	if magic := string(hdr[257:265]); magic != "ustar  \x00" {
		t.Errorf("tar magic %q, want GNU's %q", magic, "ustar  \x00")
	}
	if typ := hdr[156]; typ != 'S' {
		t.Errorf("tar type flag %q, want 'S' (GNU sparse)", typ)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if err := z.Reset(f); err != nil {
		t.Fatal(err)
	}
	rf, err := os.Open(raw)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	tr := tar.NewReader(z)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		names = append(names, h.Name)
		if h.Format != tar.FormatGNU || h.Typeflag != tar.TypeGNUSparse || h.Size != size || h.Size%disk.GiB != 0 {
			t.Errorf("member %s: format %v, type %q, size %d; want GNU, 'S' (sparse), %d (a whole GiB)", h.Name, h.Format, h.Typeflag, h.Size, size)
		}
		// The partitions (from the ESP to the root's end; the first MiB holds
		// the GPT, which a grown disk changes) are the raw disk's.
		same := l.Root.Offset + l.Root.Size
		got, want := make([]byte, disk.MiB), make([]byte, disk.MiB)
		if _, err := io.CopyN(io.Discard, tr, l.ESP.Offset); err != nil {
			t.Fatalf("read %s: %v", h.Name, err)
		}
		for off := l.ESP.Offset; off < same; off += disk.MiB {
			if _, err := io.ReadFull(tr, got); err != nil {
				t.Fatalf("read %s: %v", h.Name, err)
			}
			if _, err := rf.ReadAt(want, off); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("member %s: MiB at %d differs from the raw disk's", h.Name, off)
			}
		}
		if n, err := io.Copy(io.Discard, tr); err != nil || same+n != size {
			t.Errorf("member %s: read %d bytes (err %v), want %d", h.Name, same+n, err, size)
		}
	}
	if !slices.Equal(names, []string{"disk.raw"}) {
		t.Errorf("members %q, want only disk.raw", names)
	}
	// GNU tar reads it back as a sparse file with a valid GPT of that size.
	x := t.TempDir()
	if out, err := exec.Command("tar", "-xzf", path, "-C", x).CombinedOutput(); err != nil {
		t.Fatalf("tar -xzf: %v: %s", err, out)
	}
	verifyGPT(t, filepath.Join(x, "disk.raw"), size)
	if out, err := exec.Command("tar", "-tvzf", path).Output(); err != nil || !strings.Contains(string(out), " disk.raw\n") {
		t.Errorf("tar -tvzf: %v: %s", err, out)
	}
}

// hostTools are the real programs.
var hostTools = Tools{Disk: disk.Host{Runner: runner.Exec{}}, QemuImg: Host{Runner: runner.Exec{}}}
