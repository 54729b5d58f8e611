package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cavaliergopher/cpio"

	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/initramfs/archive"
	"github.com/kpreload/kpreload/initramfs/assemble"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/report"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestKernelModuleRequest boots Debian's generic kernel 6.1.0-56-amd64 (crc32c
// is a module there, not built in as on the cloud kernel) on an ext4 root made
// by this host's mkfs.ext4, with metadata checksums, from an initramfs that
// holds crc32c_generic and crc32c-intel but whose boot index records no soft
// dependency (an overlay replaces it; as an index written before soft
// dependencies were recorded): /init's own plan then never loads crc32c, and
// ext4's mount asks the kernel's crypto API for "crc32c", whose
// request_module("crypto-crc32c") runs /sbin/modprobe. The root mounts, and
// the real init runs, only because /init, started as that helper, resolved
// the alias against the boot index and loaded the module; the report and the
// console say so. Without the helper the mount fails ("EXT4-fs (vda): Cannot
// load crc32c driver.") and the root never comes.
func TestKernelModuleRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("QEMU boot; -short")
	}
	const kver = "6.1.0-56-amd64"
	started := time.Now()
	dir := t.TempDir()
	ktree := testenv.KernelTree(t, kver)
	initBin, _ := binaries(t)

	var main bytes.Buffer
	if _, err := assemble.Build(assemble.Options{
		Kernel:      kver,
		ModulesDir:  filepath.Join(ktree, "lib", "modules", kver),
		Init:        initBin,
		Filesystems: []string{"ext4"},
		Compression: archive.None,
	}, &main); err != nil {
		t.Fatalf("initramfs: %v", err)
	}
	indexPath := path.Join("lib/modules", kver, bootindex.InitramfsName)
	idx := indexFromArchive(t, main.Bytes(), indexPath)
	var dropped []string
	have := map[string]bool{}
	for si := range idx.Sets {
		for mi := range idx.Sets[si].Modules {
			m := &idx.Sets[si].Modules[mi]
			have[m.Name] = true
			for _, s := range append(m.SoftPre, m.SoftPost...) {
				dropped = append(dropped, m.Name+" "+s)
			}
			m.SoftPre, m.SoftPost = nil, nil
		}
	}
	// The point of the boot: ext4's soft dependency is what the overlay
	// removes, and the modules the kernel will ask for are still there.
	if !slices.Contains(dropped, "ext4 crypto-crc32c") || !have["crc32c_generic"] {
		t.Fatalf("the initramfs for %s: soft dependencies %q, crc32c_generic there: %v; want ext4's crypto-crc32c and the module", kver, dropped, have["crc32c_generic"])
	}
	t.Logf("boot index without its soft dependencies: %s", strings.Join(dropped, ", "))
	data, err := bootindex.Marshal(idx)
	if err != nil {
		t.Fatal(err)
	}
	over := archive.New()
	if err := over.AddFile(indexPath, 0o644, data); err != nil {
		t.Fatal(err)
	}
	// The kernel unpacks archives one after the other, a later file
	// replacing an earlier one (as early microcode is prepended).
	initrd := bytes.NewBuffer(main.Bytes())
	initrd.Write(make([]byte, (4-initrd.Len()%4)%4))
	if _, err := over.Encode(initrd, archive.None); err != nil {
		t.Fatal(err)
	}
	initrdPath := filepath.Join(dir, "initrd.img")
	if err := os.WriteFile(initrdPath, initrd.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	disk := rootDisk(t, dir, rootUUID, nil)
	if !metadataCsum(t, disk) {
		t.Fatalf("root disk %s: mkfs.ext4 made it without metadata_csum: the kernel would not need crc32c", disk)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 4*time.Minute))
	defer cancel()
	res, err := qemu.Run(ctx, qemu.Config{
		Kernel:     filepath.Join(ktree, "boot", "vmlinuz-"+kver),
		Initramfs:  initrdPath,
		RootDisk:   disk,
		Append:     "root=UUID=" + rootUUID,
		Timeout:    testenv.Deadline(t, 3*time.Minute),
		ConsoleLog: filepath.Join(dir, "console.log"),
		// A root that cannot mount is retried: stop at the first failure.
		Until: regexp.MustCompile(`reboot: Power down|kpreload: cannot mount root`),
	})
	if err != nil {
		t.Fatalf("boot %s: %v", kver, err)
	}
	con, _ := os.ReadFile(res.Console)
	if res.UntilMatch != "reboot: Power down" || res.Report == nil || res.RootInit == nil {
		t.Fatalf("boot %s: the root's init never ran (report back: %v); console:\n%s", kver, res.Report != nil, tailFile(res.Console, 25))
	}
	rep := res.Report
	t.Logf("%s: %s", kver, rep.Summary())

	// /init's own plan did not load crc32c: the kernel's request did.
	var served *report.Module
	for i, m := range rep.Modules {
		if !strings.HasPrefix(m.Name, "crc32c") {
			continue
		}
		t.Logf("module %s %s (%s) at %.3fs: %s", m.Name, m.Result, m.Phase, m.Start, m.Reason)
		if m.Phase != "kernel-request" {
			t.Errorf("%s %s in phase %s: /init's own plan loaded it, so this boot proves nothing", m.Name, m.Result, m.Phase)
		}
		if m.Name == "crc32c_generic" && m.Result == "loaded" {
			served = &rep.Modules[i]
		}
	}
	if served == nil {
		t.Fatalf("the report has no crc32c_generic loaded at the kernel's request; modules: %+v", rep.Modules)
	}
	if want := "requested by the kernel: crypto-crc32c"; !strings.HasPrefix(served.Reason, want) {
		t.Errorf("crc32c_generic's reason %q, want %q", served.Reason, want)
	}
	if served.End > rep.Root.Mounted || rep.Root.Mounted == 0 {
		t.Errorf("crc32c_generic loaded at %.3fs, the root mounted at %.3fs: want it before", served.End, rep.Root.Mounted)
	}
	for _, e := range rep.Events {
		if strings.Contains(e.What, "the kernel requested") {
			t.Logf("event at %.3fs: %s", e.Time, e.What)
		}
	}
	// The helper's own line on the console, before the hand-over.
	lines := helperLine.FindAllString(string(con), -1)
	t.Logf("console:\n%s", strings.Join(lines, "\n"))
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "the kernel requested crypto-crc32c: loaded") }) {
		t.Errorf("the console never shows the helper's line for crypto-crc32c:\n%s", tailFile(res.Console, 40))
	}
	if strings.Contains(string(con), "Cannot load crc32c driver") {
		t.Errorf("the kernel could not load crc32c:\n%s", tailFile(res.Console, 40))
	}
	t.Logf("boot %s, test %s", res.Duration.Round(100*time.Millisecond), time.Since(started).Round(100*time.Millisecond))
}

// helperLine is the helper's line on the console, as the kernel prints it.
var helperLine = regexp.MustCompile(`(?m)^\[ *[0-9.]+\] kpreload: the kernel requested [^\r\n]*`)

// indexFromArchive returns the boot index at name in the uncompressed newc
// archive data.
func indexFromArchive(t *testing.T, data []byte, name string) *bootindex.Index {
	t.Helper()
	r := cpio.NewReader(bytes.NewReader(data))
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("the initramfs has no %s", name)
		}
		if err != nil {
			t.Fatalf("read the initramfs: %v", err)
		}
		if h.Name != name {
			continue
		}
		var idx bootindex.Index
		if err := json.NewDecoder(r).Decode(&idx); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return &idx
	}
}

// metadataCsum reports whether the ext4 image has metadata checksums
// (s_feature_ro_compat's METADATA_CSUM, 0x400, in the superblock at 1024).
func metadataCsum(t *testing.T, img string) bool {
	t.Helper()
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, 1024); err != nil {
		t.Fatal(err)
	}
	if binary.LittleEndian.Uint16(sb[0x38:]) != 0xef53 {
		t.Fatalf("%s: not an ext4 image", img)
	}
	return binary.LittleEndian.Uint32(sb[0x64:])&0x400 != 0
}
