package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/builder/rootdisk"
	"github.com/kpreload/kpreload/initramfs/assemble"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// extVerityFlag is EXT4_VERITY_FL, the inode flag of a file with fs-verity on.
const extVerityFlag = 0x100000

// TestVerityBoots boots Debian's 6.1 cloud kernel, whose CONFIG_FS_VERITY is
// y, from a root disk made with ext4's verity feature and the test driver's
// cache on it, mounted read-write:
//
//   - the first boot hashes the module file (sha256), loads it and turns
//     fs-verity on for it in the background; the file's inode then has the
//     verity flag (debugfs, on the host);
//   - the second boot checks it by the kernel's measure alone ("fs-verity")
//     and the driver binds;
//   - a byte of that file flipped on the disk, under its Merkle tree: the
//     measure still matches, the kernel's read of the page fails (EIO), the
//     load fails and the boot reaches /sbin/init;
//   - a byte flipped in a file without fs-verity on a fresh disk: refused by
//     its sha256, nothing turned on;
//   - a byte flipped in the initramfs's copy (no fs-verity there): refused
//     by its sha256.
func TestVerityBoots(t *testing.T) {
	testenv.SkipShort(t, "QEMU boots of a Debian kernel")
	kver := kernels[0]
	ktree := testenv.KernelTree(t, kver)
	initBin, rootInit := binaries(t)
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	st, err := store.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := st.AddFiles(context.Background(), store.AddRequest{Driver: "kpreload-edu", Version: "1.0.0", Files: []string{eduModule(t, kver, "1.0.0")}})
	if err != nil {
		t.Fatalf("cache add: %v", err)
	}
	if m.Modules[0].Verity == "" {
		t.Fatalf("the set records no fs-verity digest: %+v", m.Modules[0])
	}
	rel, err := filepath.Rel(cache, st.ObjectPath(m.Modules[0].SHA256))
	if err != nil {
		t.Fatal(err)
	}
	object := "/" + bootindex.RootCacheDir + "/" + rel // the module file on the root disk
	plainInitrd := filepath.Join(dir, "initrd.img")
	if _, err := assemble.WriteFile(assemble.Options{Kernel: kver, ModulesDir: filepath.Join(ktree, "lib", "modules", kver), Init: initBin}, plainInitrd); err != nil {
		t.Fatalf("initramfs: %v", err)
	}
	disk := verityDisk(t, filepath.Join(dir, "root.img"), rootInit, cache)

	// First boot: hashed, then fs-verity turned on.
	res := verityBoot(t, ktree, kver, plainInitrd, disk, "first")
	e := eduEntry(t, res.Report)
	if e.Result != "loaded" || e.Phase != "rootfs" || e.Verified != "sha256" || !e.VerityStarted {
		t.Errorf("first boot: kpreload_edu %+v, want loaded in the rootfs phase, verified by sha256, fs-verity started", e)
	}
	first := e.End - e.Start
	if flags := inodeFlags(t, disk, object); flags&extVerityFlag == 0 {
		t.Fatalf("after the first boot the module file's inode flags are %#x: fs-verity is not on", flags)
	}

	// Second boot: the kernel's measure, no hashing.
	res = verityBoot(t, ktree, kver, plainInitrd, disk, "second")
	e = eduEntry(t, res.Report)
	if e.Result != "loaded" || e.Verified != "fs-verity" || e.VerityStarted {
		t.Errorf("second boot: kpreload_edu %+v, want loaded, verified by fs-verity", e)
	}
	if edu, _ := pciDriver(res.RootInit, "1234:11e8"); edu.Driver != "kpreload_edu" {
		t.Errorf("second boot: edu device %+v, want bound to kpreload_edu", edu)
	}
	t.Logf("kpreload_edu (%d bytes) from insert to loaded: first boot (sha256, fs-verity started) %.3fs, second boot (%s) %.3fs", m.Modules[0].Size, first, e.Verified, e.End-e.Start)

	// A flipped byte under the Merkle tree.
	flipOnDisk(t, disk, object)
	res = verityBoot(t, ktree, kver, plainInitrd, disk, "flipped-verity")
	e = eduEntry(t, res.Report)
	if e.Result != "failed" || e.Errno != "EIO" || e.Verified != "fs-verity" {
		t.Errorf("flipped byte in the fs-verity file: kpreload_edu %+v, want failed with EIO (the kernel's page check) after the fs-verity check", e)
	}
	t.Logf("flipped byte in the fs-verity file: %s (%s), %s", e.Result, e.Errno, reachedInit(t, res))

	// A flipped byte in a file without fs-verity, on a fresh disk.
	bad := filepath.Join(dir, "bad-cache")
	if out, err := exec.Command("cp", "-a", cache, bad).CombinedOutput(); err != nil {
		t.Fatalf("copy the cache: %v\n%s", err, out)
	}
	flipFile(t, filepath.Join(bad, rel))
	plainDisk := verityDisk(t, filepath.Join(dir, "plain.img"), rootInit, bad)
	res = verityBoot(t, ktree, kver, plainInitrd, plainDisk, "flipped-plain")
	e = eduEntry(t, res.Report)
	if e.Result != "refused" || !strings.Contains(e.Reason, "digest mismatch: file sha256") || e.VerityStarted {
		t.Errorf("flipped byte in a plain file: kpreload_edu %+v, want refused by its sha256", e)
	}
	if flags := inodeFlags(t, plainDisk, object); flags&extVerityFlag != 0 {
		t.Errorf("the refused file's inode flags are %#x: fs-verity was turned on for it", flags)
	}
	t.Logf("flipped byte in a plain file: %s (%s), %s", e.Result, e.Reason, reachedInit(t, res))

	// A flipped byte in the initramfs's copy.
	badInitrd := filepath.Join(dir, "bad-initrd.img")
	o := assemble.Options{Kernel: kver, ModulesDir: filepath.Join(ktree, "lib", "modules", kver), Init: initBin, CacheDir: bad}
	if _, err := assemble.WriteFile(o, badInitrd); err != nil {
		t.Fatalf("initramfs: %v", err)
	}
	emptyDisk := verityDisk(t, filepath.Join(dir, "empty.img"), rootInit, "")
	res = verityBoot(t, ktree, kver, badInitrd, emptyDisk, "flipped-initramfs")
	e = eduEntry(t, res.Report)
	if e.Result != "refused" || !strings.Contains(e.Reason, "digest mismatch: file sha256") || !strings.HasPrefix(e.Phase, "initramfs") {
		t.Errorf("flipped byte in the initramfs copy: kpreload_edu %+v, want refused by its sha256 in the initramfs", e)
	}
	t.Logf("flipped byte in the initramfs copy: %s (%s), %s", e.Result, e.Reason, reachedInit(t, res))
}

// verityDisk builds an ext4 root with the verity feature, the test init and,
// unless cache is empty, the module cache.
func verityDisk(t *testing.T, img, rootInit, cache string) string {
	t.Helper()
	extra := map[string]string{}
	if cache != "" {
		extra["/"+bootindex.RootCacheDir] = cache
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 2*time.Minute))
	defer cancel()
	if err := rootdisk.Build(ctx, rootdisk.Options{Out: img, SizeMB: 64, UUID: rootUUID, Label: "kpreload-root", Init: rootInit, Extra: extra, Verity: true}); err != nil {
		t.Fatalf("root disk: %v", err)
	}
	return img
}

// verityBoot boots the disk read-write (as kpreload's images do) and
// returns the result once the root's init reported.
func verityBoot(t *testing.T, ktree, kver, initrd, disk, name string) *qemu.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 4*time.Minute))
	defer cancel()
	res, err := qemu.Run(ctx, qemu.Config{
		Kernel:     filepath.Join(ktree, "boot", "vmlinuz-"+kver),
		Initramfs:  initrd,
		RootDisk:   disk,
		Devices:    []string{"edu"},
		Append:     "root=UUID=" + rootUUID + " rw",
		Timeout:    testenv.Deadline(t, 3*time.Minute),
		ConsoleLog: filepath.Join(filepath.Dir(disk), name+"-console.log"),
	})
	if err != nil {
		t.Fatalf("%s boot: %v", name, err)
	}
	if res.Report == nil || res.RootInit == nil {
		t.Fatalf("%s boot did not reach the root's init (report %v); console:\n%s", name, res.Report != nil, tailFile(res.Console, 30))
	}
	if len(res.Report.Errors) != 0 {
		t.Logf("%s boot: report errors %q", name, res.Report.Errors)
	}
	return res
}

// inodeFlags returns the inode flags debugfs reads for path on the disk.
func inodeFlags(t *testing.T, disk, path string) uint64 {
	t.Helper()
	out := debugfs(t, disk, "stat "+path)
	m := regexp.MustCompile(`Flags: 0x([0-9a-f]+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("debugfs stat %s printed no flags:\n%s", path, out)
	}
	f, _ := strconv.ParseUint(m[1], 16, 64)
	return f
}

// flipOnDisk flips a byte of path's first data block in the disk image
// itself (debugfs bmap names the block; the filesystem is not mounted),
// leaving the file's metadata, its Merkle tree included, as it was.
func flipOnDisk(t *testing.T, disk, path string) {
	t.Helper()
	out := strings.TrimSpace(debugfs(t, disk, "bmap "+path+" 0"))
	blk, err := strconv.ParseInt(out, 10, 64)
	if err != nil || blk <= 0 {
		t.Fatalf("debugfs bmap %s 0 = %q: no block", path, out)
	}
	f, err := os.OpenFile(disk, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	off := blk*4096 + 100
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x01
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// flipFile flips a byte of a file on the host.
func flipFile(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[100] ^= 0x01
	os.Chmod(path, 0o644)
	if err := os.WriteFile(path, b, 0o444); err != nil {
		t.Fatal(err)
	}
}

// debugfs runs one debugfs request on the disk image and returns its output.
func debugfs(t *testing.T, disk, request string) string {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", request, disk).Output()
	if err != nil {
		t.Fatalf("debugfs -R %q %s: %v", request, disk, err)
	}
	return string(out)
}
