package image

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	debarchive "github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/builder/image/bootloader"
	"github.com/kpreload/kpreload/builder/image/disk"
	"github.com/kpreload/kpreload/builder/image/rootfiles"
	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/builder/rootdisk"
	"github.com/kpreload/kpreload/initramfs/archive"
	"github.com/kpreload/kpreload/initramfs/assemble"
	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// fallbackKernel is Debian's generic kernel, whose ext4 is a module (the
// cloud kernel builds it in): a kpreload initramfs without it cannot mount
// an ext4 root.
const fallbackKernel = "6.1.0-56-amd64"

// brokenInitramfs writes a kpreload initramfs of kernel that holds no
// module of the root's filesystem (as `kpreload initramfs --filesystems
// vfat` makes for an ext4 root) and returns its path.
func brokenInitramfs(t *testing.T, kernel, modules, initBin string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "initrd-vfat-only.img")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := assemble.Build(assemble.Options{
		Kernel: kernel, ModulesDir: modules, Init: initBin, Compression: archive.Zstd,
		Filesystems: []string{"vfat"}, FirmwareDir: t.TempDir(),
	}, f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// fallbackRoot is a root staged for the fallback tests: the generic
// kernel's image, kpreload's /init, the test init (which reports and powers
// off), and the kernel command line its entries boot with.
type fallbackRoot struct {
	root, modules, rootUUID, cmdline string
}

// stageFallbackRoot stages a fallbackRoot; /init gives up on the root after 5 s.
func stageFallbackRoot(t *testing.T, initBin string) fallbackRoot {
	t.Helper()
	ktree := testenv.KernelTree(t, fallbackKernel)
	work := t.TempDir()
	rootInit := testenv.GoBuildStatic(t, work, "kpreload-rootinit", "./cmd/kpreload-rootinit")
	root := filepath.Join(work, "root")
	if err := rootdisk.Stage(root, rootdisk.Options{Init: rootInit}); err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{
		filepath.Join(ktree, "boot", "vmlinuz-"+fallbackKernel): install.KernelImagePath(fallbackKernel),
		initBin: install.Init,
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, dst)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := fileutil.CopyFile(src, filepath.Join(root, dst), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// kpreload-boot-ok.service, as every image carries it: without
	// something to take the fallback back once a boot comes up, kpreload's
	// entries arrange none.
	unit, err := fs.ReadFile(rootfiles.FS, path.Join("files", install.BootOKUnit))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, path.Dir(install.BootOKUnit)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, install.BootOKUnit), unit, 0o644); err != nil {
		t.Fatal(err)
	}
	u := disk.NewUUID()
	return fallbackRoot{
		root: root, modules: filepath.Join(ktree, "lib/modules", fallbackKernel), rootUUID: u,
		cmdline: "console=ttyS0 panic=-1 kpreload.report=" + qemu.ReportDevice + " kpreload.rootfail=5",
	}
}

// writeFallbackDisk writes a GPT disk of the ESP's files and the root (ext4
// with mke2fs's defaults: metadata checksums, so ext4 needs crc32c, which
// the generic kernel has as a module loaded through ext4's soft dependency).
func writeFallbackDisk(ctx context.Context, t *testing.T, esp []disk.File, root, rootUUID string) (string, disk.Layout) {
	t.Helper()
	l, err := disk.NewLayout(192, 64, disk.NewUUID(), disk.NewUUID(), disk.NewUUID())
	if err != nil {
		t.Fatal(err)
	}
	raw := filepath.Join(t.TempDir(), "disk.raw")
	if err := disk.Write(ctx, DefaultTools().Disk, raw, l, disk.NewVolumeID(), esp, root, rootUUID); err != nil {
		t.Fatal(err)
	}
	return raw, l
}

// fallbackBoot boots disk once through OVMF until the machine stops (QEMU
// runs with -no-reboot: a reboot ends it too).
func fallbackBoot(ctx context.Context, t *testing.T, progress Progress, n int, disk string) (*qemu.Result, string) {
	t.Helper()
	progress(fmt.Sprintf("boot %d", n))
	res, err := (&qemu.Runner{WorkDir: t.TempDir()}).Run(ctx, qemu.Config{Firmware: qemu.FirmwareUEFI, RootDisk: disk, Timeout: testenv.Deadline(t, 300*time.Second)})
	if err != nil {
		t.Fatalf("boot %d: %v", n, err)
	}
	console, _ := os.ReadFile(res.Console)
	t.Logf("boot %d: QEMU ran %s", n, res.Duration.Round(time.Second))
	return res, string(console)
}

// checkFellBack checks a boot whose root could not be mounted: the report
// names the missing ext4 module and the fallback, /init rebooted.
func checkFellBack(t *testing.T, n int, res *qemu.Result, console string) {
	t.Helper()
	rep := res.Report
	if rep == nil || rep.Root.Fallback != "reboot" || !slices.ContainsFunc(rep.Root.FailedModules, func(s string) bool { return strings.HasPrefix(s, "fs-ext4: no module in the initramfs") }) {
		t.Fatalf("boot %d: report %+v (console %s): want the root's failure, fs-ext4's module missing, and a reboot", n, rep, res.Console)
	}
	if !strings.Contains(rep.Cmdline, install.FallbackFlag) || !strings.Contains(console, "kpreload: rebooting into the boot loader's fallback entry") || !strings.Contains(console, "reboot: Restarting system") {
		t.Errorf("boot %d: cmdline %q; console %s: want the fallback flag, /init's reboot", n, rep.Cmdline, res.Console)
	}
	t.Logf("boot %d: %s", n, rep.Root.Failed)
}

// checkReachedInit checks a boot through the fallback entry: the root was
// mounted and its init ran, and the entry did not carry the fallback flag.
func checkReachedInit(t *testing.T, n int, res *qemu.Result, console string) {
	t.Helper()
	if res.RootInit == nil || res.Report == nil || res.Report.Root.Mounted <= 0 || strings.Contains(res.Report.Cmdline, install.FallbackFlag) || !strings.Contains(console, "kpreload-rootinit: ") {
		t.Fatalf("boot %d: report %+v, root init %v (console %s): want the fallback entry's boot to reach the root's init", n, res.Report, res.RootInit != nil, res.Console)
	}
}

// TestSystemdBootFallback boots, through OVMF and the real systemd-boot
// (Debian 12's systemd-boot-efi), a disk whose ext4 root the default
// kpreload entry cannot mount: its initramfs holds no ext4 module. Beside
// it is a distribution entry, as kernel-install writes one (here booting a
// full kpreload initramfs, the stand-in for initramfs-tools'), so
// `kpreload install` counts the kpreload entry's boots and tells /init it
// may fall back. Boots 1 and 2: /init finds the root device, fails to
// mount it for kpreload.rootfail=, says why (no module for fs-ext4) in the
// report it sends, and reboots; systemd-boot counts each (+1-1, +0-2).
// Boot 3: the kpreload entry is bad, loader.conf's default no longer
// matches it, and systemd-boot boots the distribution entry, which reaches
// the root's init.
func TestSystemdBootFallback(t *testing.T) {
	ctx, _, initBin, progress := e2eStart(t, "three UEFI boots through systemd-boot", 15*time.Minute)
	fr := stageFallbackRoot(t, initBin)
	root, modules, rootUUID := fr.root, fr.modules, fr.rootUUID
	cmdline := "root=UUID=" + rootUUID + " rw " + fr.cmdline
	work := t.TempDir()

	// The ESP with the distribution's entry (kernel-install's layout).
	esp := filepath.Join(work, "esp")
	distEntry := "debian-" + fallbackKernel + ".conf"
	if err := os.MkdirAll(filepath.Join(esp, install.ESPEntriesDir), 0o755); err != nil {
		t.Fatal(err)
	}
	dist := fmt.Sprintf("title Debian GNU/Linux 12 (bookworm)\nversion %s\nsort-key debian\noptions %s\nlinux /debian/%s/linux\ninitrd /debian/%s/initrd.img-%s\n",
		fallbackKernel, cmdline, fallbackKernel, fallbackKernel, fallbackKernel)
	if err := os.WriteFile(filepath.Join(esp, install.ESPEntriesDir, distEntry), []byte(dist), 0o644); err != nil {
		t.Fatal(err)
	}
	progress("kpreload install (systemd-boot)")
	if _, err := install.Install(ctx, install.Options{
		Root: root, ESP: esp, Bootloader: install.SystemdBoot, Kernels: []string{fallbackKernel}, Cmdline: cmdline,
		ModulesDir: func(string) string { return modules }, Log: testWriter{t},
	}); err != nil {
		t.Fatal(err)
	}
	counted := install.CountedEntryName(fallbackKernel)
	if b, err := os.ReadFile(filepath.Join(esp, install.ESPEntriesDir, counted)); err != nil || !strings.Contains(string(b), " "+install.FallbackFlag+"\n") {
		t.Fatalf("kpreload's entry %s: %q, %v: want it counted, with %s", counted, b, err, install.FallbackFlag)
	}
	// The distribution's files: the kernel and a full initramfs (it mounts ext4).
	for src, dst := range map[string]string{
		filepath.Join(esp, install.ESPKernelPath(fallbackKernel)): "debian/" + fallbackKernel + "/linux",
		filepath.Join(esp, install.ESPInitrdPath(fallbackKernel)): "debian/" + fallbackKernel + "/initrd.img-" + fallbackKernel,
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(esp, dst)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := fileutil.CopyFile(src, filepath.Join(esp, dst), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The fault: kpreload's initramfs loses the root filesystem's module.
	if err := fileutil.CopyFile(brokenInitramfs(t, fallbackKernel, modules, initBin), filepath.Join(esp, install.ESPInitrdPath(fallbackKernel)), 0o644); err != nil {
		t.Fatal(err)
	}

	progress("disk")
	var espList []disk.File
	espList = append(espList, disk.File{Src: bootloader.SystemdBootEFI, Dst: install.ESPBootloader}, disk.File{Src: bootloader.SystemdBootEFI, Dst: install.ESPSystemdBoot})
	if err := filepath.WalkDir(esp, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(esp, p)
		espList = append(espList, disk.File{Src: p, Dst: filepath.ToSlash(rel)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	raw, l := writeFallbackDisk(ctx, t, espList, root, rootUUID)
	entries := func() []string {
		t.Helper()
		out, err := exec.CommandContext(ctx, "mdir", "-b", "-i", fmt.Sprintf("%s@@%d", raw, l.ESP.Offset), "::/"+install.ESPEntriesDir).CombinedOutput()
		if err != nil {
			t.Fatalf("mdir: %v: %s", err, out)
		}
		var names []string
		for _, f := range strings.Fields(string(out)) {
			names = append(names, strings.ToLower(filepath.Base(f)))
		}
		slices.Sort(names)
		return names
	}
	for n, left := range []string{"+1-1", "+0-2"} {
		res, console := fallbackBoot(ctx, t, progress, n+1, raw)
		checkFellBack(t, n+1, res, console)
		if want := "kpreload-" + fallbackKernel + left + ".conf"; !slices.Contains(entries(), want) {
			t.Errorf("after boot %d: entries %q, want %s (systemd-boot's count)", n+1, entries(), want)
		}
	}
	res, console := fallbackBoot(ctx, t, progress, 3, raw)
	checkReachedInit(t, 3, res, console)
	if got := entries(); !slices.Contains(got, "kpreload-"+fallbackKernel+"+0-2.conf") || !slices.Contains(got, distEntry) {
		t.Errorf("after boot 3: entries %q: want kpreload's bad and the distribution's", got)
	}
}

// testWriter sends what it is given to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// grubTools unpacks Debian's GRUB for UEFI (grub-efi-amd64-bin: the
// modules) and grub-common (grub-mkimage, /etc/grub.d/00_header) of the
// default suite through builder/archive, cached like the kernels' packages,
// and returns both trees.
func grubTools(ctx context.Context, t *testing.T) (efiBin, common string) {
	t.Helper()
	a, err := debarchive.New("", testenv.CacheRoot())
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, name := range []string{"grub-efi-amd64-bin", "grub-common"} {
		versions, err := a.Versions(ctx, name)
		if err != nil || len(versions) == 0 {
			t.Fatalf("%s: versions %v, %v", name, versions, err)
		}
		dir, err := a.Unpack(ctx, name, versions[0], filepath.Join(testenv.CacheRoot(), "debs"), filepath.Join(testenv.CacheRoot(), "sources"))
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, dir)
	}
	return dirs[0], dirs[1]
}

// TestGRUBFallback boots, through OVMF and Debian 12's GRUB, a disk whose
// ext4 root kpreload's default entry cannot mount: its initramfs holds no
// ext4 module. grub.cfg is Debian's own 00_header (which consumes
// next_entry) followed by kpreload's entries for a root with a
// distribution initramfs (here a full kpreload initramfs stands in for
// initramfs-tools'), so kpreload's entry saves the distribution entry as
// the one-shot next_entry before it boots. Boot 1: save_env works, /init
// gets kpreload.fallback=1, fails to mount the root for
// kpreload.rootfail=, reports the missing module and reboots. Boot 2: GRUB
// boots the distribution entry once, which reaches the root's init, and
// next_entry is gone from grubenv. Boot 3, the initramfs mended: kpreload's
// entry again, which comes up, and `kpreload kernel-hook boot-ok` (run by
// the root's init as kpreload-boot-ok.service runs it) clears next_entry.
func TestGRUBFallback(t *testing.T) {
	ctx, kpreloadBin, initBin, progress := e2eStart(t, "three UEFI boots through GRUB", 15*time.Minute)
	efiBin, common := grubTools(ctx, t)
	fr := stageFallbackRoot(t, initBin)
	root := fr.root
	modules := func(string) string { return fr.modules }
	// The root's init runs kpreload-boot-ok.service's command before it reports.
	if err := os.MkdirAll(filepath.Join(root, path.Dir(install.Kpreload)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fileutil.CopyFile(kpreloadBin, filepath.Join(root, install.Kpreload), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "etc/kpreload-test"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/kpreload-test/run"), []byte("/"+install.Kpreload+" kernel-hook boot-ok\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// The distribution's initramfs (the stand-in mounts ext4), GRUB's
	// environment block as kpreload install makes it, and grub.cfg.
	if _, err := install.BuildInitramfs(install.Options{Root: root, ModulesDir: modules}, fallbackKernel); err != nil {
		t.Fatal(err)
	}
	if err := fileutil.CopyFile(filepath.Join(root, install.InitramfsPath(fallbackKernel)), filepath.Join(root, "boot/initrd.img-"+fallbackKernel), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := install.EnsureGrubEnv(root); err != nil {
		t.Fatal(err)
	}
	header := exec.CommandContext(ctx, "sh", filepath.Join(common, "etc/grub.d/00_header"))
	header.Env = []string{"PATH=/usr/bin:/bin", "pkgdatadir=" + filepath.Join(common, "usr/share/grub"),
		"GRUB_DEFAULT=0", "GRUB_TIMEOUT=0", "GRUB_TERMINAL_INPUT=console", "GRUB_TERMINAL_OUTPUT=console"}
	cfg, err := header.Output()
	if err != nil || !strings.Contains(string(cfg), `set default="${next_entry}"`) {
		t.Fatalf("Debian's 00_header: %v\n%s", err, cfg)
	}
	var entries strings.Builder
	if err := install.GrubEntries(&entries, root, install.GrubEnv{
		Prepare:  "\tinsmod part_gpt\n\tinsmod ext2\n\tsearch --no-floppy --fs-uuid --set=root " + fr.rootUUID + "\n",
		BootPath: "/boot", DeviceUUID: fr.rootUUID, Cmdline: fr.cmdline + " rw kpreload.rootinit.run=/etc/kpreload-test/run", Distributor: "Debian",
	}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(entries.String(), "set next_entry='"+install.GrubDistributionEntryID(fallbackKernel)+"'") {
		t.Fatalf("kpreload's GRUB entries save no fallback:\n%s", entries.String())
	}
	if err := os.WriteFile(filepath.Join(root, install.GrubConfig), append(cfg, entries.String()...), 0o644); err != nil {
		t.Fatal(err)
	}
	// GRUB's UEFI image finds the root by UUID and reads /boot/grub from it.
	efiDir := filepath.Join(efiBin, "usr/lib/grub/x86_64-efi")
	if err := os.CopyFS(filepath.Join(root, "boot/grub/x86_64-efi"), os.DirFS(efiDir)); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	early := filepath.Join(work, "early.cfg")
	if err := os.WriteFile(early, []byte(bootloader.GrubEarlyConfig(fr.rootUUID)), 0o644); err != nil {
		t.Fatal(err)
	}
	bootx64 := filepath.Join(work, "BOOTX64.EFI")
	if b, err := exec.CommandContext(ctx, filepath.Join(common, "usr/bin/grub-mkimage"), "-O", "x86_64-efi", "-d", efiDir, "-p", "/boot/grub",
		"-c", early, "-o", bootx64, "part_gpt", "ext2", "fat", "search_fs_uuid", "normal", "linux", "loadenv", "test", "echo", "gzio").CombinedOutput(); err != nil {
		t.Fatalf("grub-mkimage: %v: %s", err, b)
	}
	// The fault: kpreload's initramfs loses the root filesystem's module.
	good := filepath.Join(work, "initrd-good.img")
	if err := os.Rename(filepath.Join(root, install.InitramfsPath(fallbackKernel)), good); err != nil {
		t.Fatal(err)
	}
	if err := fileutil.CopyFile(brokenInitramfs(t, fallbackKernel, fr.modules, initBin), filepath.Join(root, install.InitramfsPath(fallbackKernel)), 0o644); err != nil {
		t.Fatal(err)
	}
	progress("disk")
	raw, l := writeFallbackDisk(ctx, t, []disk.File{{Src: bootx64, Dst: install.ESPBootloader}}, root, fr.rootUUID)
	grubenv := func() string {
		t.Helper()
		out, err := exec.CommandContext(ctx, "debugfs", "-R", "cat /"+install.GrubEnvFile, fmt.Sprintf("%s?offset=%d", raw, l.Root.Offset)).Output()
		if err != nil {
			t.Fatalf("debugfs: %v", err)
		}
		return string(out)
	}

	res, console := fallbackBoot(ctx, t, progress, 1, raw)
	checkFellBack(t, 1, res, console)
	if env := grubenv(); !strings.Contains(env, "\nnext_entry="+install.GrubDistributionEntryID(fallbackKernel)+"\n") {
		t.Errorf("grubenv after boot 1 lacks the one-shot fallback:\n%.200s", env)
	}
	res, console = fallbackBoot(ctx, t, progress, 2, raw)
	checkReachedInit(t, 2, res, console)
	if !strings.Contains(console, "Loading Linux "+fallbackKernel+" (distribution initramfs) ...") {
		t.Errorf("boot 2 did not come through the distribution entry (console %s)", res.Console)
	}
	if env := grubenv(); strings.Contains(env, "next_entry=kpreload") {
		t.Errorf("grubenv after boot 2 still holds the fallback:\n%.200s", env)
	}

	// Boot 3: kpreload's initramfs mended, its entry boots again (the
	// fallback was once), saves next_entry, comes up, and boot-ok takes
	// next_entry back, so the boot after it is kpreload's again.
	mend := exec.CommandContext(ctx, "debugfs", "-w", "-f", "-", fmt.Sprintf("%s?offset=%d", raw, l.Root.Offset))
	mend.Stdin = strings.NewReader("rm /" + install.InitramfsPath(fallbackKernel) + "\nwrite " + good + " /" + install.InitramfsPath(fallbackKernel) + "\n")
	if b, err := mend.CombinedOutput(); err != nil {
		t.Fatalf("debugfs: %v: %s", err, b)
	}
	res, console = fallbackBoot(ctx, t, progress, 3, raw)
	if res.RootInit == nil || res.Report == nil || res.Report.Root.Mounted <= 0 || !strings.Contains(res.Report.Cmdline, install.FallbackFlag) {
		t.Fatalf("boot 3: report %+v, root init %v (console %s): want kpreload's entry, with its fallback saved, to reach the root's init", res.Report, res.RootInit != nil, res.Console)
	}
	if want := "cleared GRUB's one-shot fallback next_entry=" + install.GrubDistributionEntryID(fallbackKernel); !strings.Contains(console, want) {
		t.Errorf("boot 3: kpreload kernel-hook boot-ok did not say %q (console %s)", want, res.Console)
	}
	if env := grubenv(); strings.Contains(env, "next_entry=") || len(env) != 1024 {
		t.Errorf("grubenv after boot 3 (%d bytes) still holds a next_entry:\n%.200s", len(env), env)
	}
}
