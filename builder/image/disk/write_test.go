package disk

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/internal/runner"
)

// recorder stands in for sfdisk, mkfs and mtools: it records each command
// line and sfdisk's input, and fails the command whose line begins with fail.
type recorder struct {
	fail   string
	cmds   []string
	script string
}

func (r *recorder) LookPath(name string) (string, error) { return "/fake/" + name, nil }

func (r *recorder) Run(ctx context.Context, c runner.Cmd) ([]byte, error) {
	line := c.String()
	r.cmds = append(r.cmds, line)
	if c.Stdin != nil {
		b, _ := io.ReadAll(c.Stdin)
		r.script = string(b)
	}
	if r.fail != "" && strings.HasPrefix(line, r.fail) {
		return nil, &runner.Error{Cmd: c, Err: errors.New("exit status 1"), Tail: []string{"fake failure"}}
	}
	return nil, nil
}

// TestWrite checks the commands Write gives the tools for a layout and the
// ESP's files, and that each tool's failure fails it with the tool's words.
func TestWrite(t *testing.T) {
	ctx := context.Background()
	l, err := NewLayout(600, 64, NewUUID(), NewUUID(), NewUUID())
	if err != nil {
		t.Fatal(err)
	}
	esp := []File{{Src: "/host/bootx64.efi", Dst: "EFI/BOOT/BOOTX64.EFI"}, {Src: "/host/entry.conf", Dst: "loader/entries/a.conf"}, {Src: "/host/l.conf", Dst: "loader/loader.conf"}}
	out := filepath.Join(t.TempDir(), "disk.raw")
	r := &recorder{}
	vol := NewVolumeID()
	if err := Write(ctx, Host{Runner: r}, out, l, vol, esp, "/root", "root-uuid"); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(out); err != nil || st.Size() != l.DiskSize {
		t.Errorf("disk: %v, %v; want %d bytes", st, err, l.DiskSize)
	}
	img := out + "@@1048576"
	want := []string{
		"sfdisk --quiet --no-reread --no-tell-kernel " + out,
		"mkfs.vfat -F 32 -s 1 -n ESP -i " + vol + " --offset=2048 " + out + " 65536",
		"mmd -i " + img + " ::/EFI",
		"mmd -i " + img + " ::/EFI/BOOT",
		"mcopy -o -i " + img + " /host/bootx64.efi ::/EFI/BOOT/BOOTX64.EFI",
		"mmd -i " + img + " ::/loader",
		"mmd -i " + img + " ::/loader/entries",
		"mcopy -o -i " + img + " /host/entry.conf ::/loader/entries/a.conf",
		"mcopy -o -i " + img + " /host/l.conf ::/loader/loader.conf",
		"mkfs.ext4 -q -F -O verity -b 4096 -L root -U root-uuid -E offset=68157440 -d /root " + out + " 546816k",
	}
	if got := strings.Join(r.cmds, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("commands:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	if r.script != l.SfdiskScript() {
		t.Errorf("sfdisk read %q, want the layout's script", r.script)
	}
	if got, want := FATUUID("ABCD1234"), "ABCD-1234"; got != want {
		t.Errorf("FATUUID = %q, want %q", got, want)
	}
	for _, tt := range []struct{ fail, wantErr string }{
		{"sfdisk", "sfdisk --quiet"},
		{"mkfs.vfat", "ESP: mkfs.vfat"},
		{"mmd", "ESP: mmd"},
		{"mcopy", "ESP: mcopy"},
		{"mkfs.ext4", "root filesystem: mkfs.ext4"},
	} {
		err := Write(ctx, Host{Runner: &recorder{fail: tt.fail}}, out, l, vol, esp, "/root", "root-uuid")
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "fake failure") {
			t.Errorf("Write with %s failing = %v, want %q and the tool's words", tt.fail, err, tt.wantErr)
		}
	}
	if err := Write(ctx, Host{Runner: &recorder{}}, filepath.Join(t.TempDir(), "no", "disk.raw"), l, vol, nil, "/root", "u"); err == nil {
		t.Error("Write into a missing directory: nil error")
	}
}

// TestHostCommands checks the command lines of the tools Write does not use.
func TestHostCommands(t *testing.T) {
	r := &recorder{}
	h := Host{Runner: r}
	ctx := context.Background()
	h.RelocateBackupGPT(ctx, "d")
	h.CopySparse(ctx, "a", "b")
	h.TarSparse(ctx, "/s", "disk.raw", "/o.tar.gz")
	want := []string{
		"sfdisk --quiet --no-reread --no-tell-kernel --relocate gpt-bak-std d",
		"cp --sparse=always --reflink=auto a b",
		"tar --format=gnu --owner=0 --group=0 --numeric-owner -Sczf /o.tar.gz disk.raw",
	}
	if got := strings.Join(r.cmds, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("commands:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

// TestBIOSSetup puts boot.img into the MBR, keeping the partition table,
// and core.img into the BIOS boot partition with its blocklist; and refuses
// what does not fit.
func TestBIOSSetup(t *testing.T) {
	l, err := NewLayout(8, 2, NewUUID(), NewUUID(), NewUUID())
	if err != nil {
		t.Fatal(err)
	}
	l = l.WithBIOSBoot(NewUUID())
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.raw")
	mbr := make([]byte, SectorSize)
	for i := bootNTMagic; i < bootPartEnd; i++ {
		mbr[i] = 0xee // the protective partition table
	}
	f, _ := os.Create(disk)
	f.Write(mbr)
	f.Truncate(l.DiskSize)
	f.Close()
	boot := filepath.Join(dir, "boot.img")
	os.WriteFile(boot, bytes.Repeat([]byte{0x11}, SectorSize), 0o644)
	core := filepath.Join(dir, "core.img")
	os.WriteFile(core, bytes.Repeat([]byte{0x22}, 3*SectorSize+7), 0o644)
	if err := BIOSSetup(disk, l, boot, core); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(disk)
	if got, want := binary.LittleEndian.Uint64(b[bootKernelSector:]), uint64(l.BIOSBoot.Offset/SectorSize); got != want {
		t.Errorf("boot.img's core sector = %d, want %d", got, want)
	}
	if !bytes.Equal(b[bootNTMagic:bootPartEnd], mbr[bootNTMagic:bootPartEnd]) {
		t.Error("the partition table was not kept")
	}
	bl := b[l.BIOSBoot.Offset+SectorSize-blocklistSize:]
	if got, want := binary.LittleEndian.Uint16(bl[8:]), uint16(3); got != want {
		t.Errorf("blocklist length = %d, want %d sectors", got, want)
	}
	big := filepath.Join(dir, "big.img")
	os.WriteFile(big, make([]byte, 2*MiB), 0o644)
	for _, tt := range []struct {
		name       string
		l          Layout
		boot, core string
		wantErr    string
	}{
		{"no BIOS boot partition", Layout{}, boot, core, "no BIOS boot partition"},
		{"boot.img too big", l, core, core, "want 512"},
		{"core.img too big", l, boot, big, "core.img is"},
		{"missing boot.img", l, filepath.Join(dir, "none"), core, "no such file"},
		{"missing core.img", l, boot, filepath.Join(dir, "none"), "no such file"},
	} {
		if err := BIOSSetup(disk, tt.l, tt.boot, tt.core); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: BIOSSetup = %v, want %q", tt.name, err, tt.wantErr)
		}
	}
}

// TestMkfsExt4Verity makes a small root filesystem with the real mkfs.ext4
// and wants ext4's verity feature in its superblock, as dumpe2fs reads it:
// without it the booted image cannot turn fs-verity on for its modules.
func TestMkfsExt4Verity(t *testing.T) {
	for _, tool := range []string{"mkfs.ext4", "dumpe2fs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s (e2fsprogs) is required: scripts/deps.sh installs it: %v", tool, err)
		}
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "root.img")
	if err := (Host{}).MkfsExt4(context.Background(), img, 0, 8192, "root", "0b5e2d1c-6d2b-4d8e-9b1a-2f0c4b7d9e11", root); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("dumpe2fs", "-h", img).Output()
	if err != nil {
		t.Fatalf("dumpe2fs -h: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f, ok := strings.CutPrefix(line, "Filesystem features:"); ok {
			if !slices.Contains(strings.Fields(f), "verity") {
				t.Errorf("root filesystem features %q lack verity", strings.TrimSpace(f))
			}
			if !strings.Contains(string(out), "\nBlock size:               4096\n") {
				t.Errorf("root filesystem of 8 MiB: block size is not 4096:\n%s", out)
			}
			return
		}
	}
	t.Fatalf("dumpe2fs -h printed no features line:\n%s", out)
}
