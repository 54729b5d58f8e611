package image

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/image/bootloader"
	"github.com/kpreload/kpreload/builder/image/disk"
	"github.com/kpreload/kpreload/builder/image/formats"
	"github.com/kpreload/kpreload/builder/image/rootfs"
	"github.com/kpreload/kpreload/builder/image/stage"
	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/recipe"
)

// fakeJob returns a job for a plain GRUB image of testKernel whose tools are
// f's, writing into t's temporary directories.
func fakeJob(t *testing.T, f *fakeRunner, edit func(*Options)) (*Job, Options) {
	t.Helper()
	f.t, f.kernels = t, []string{testKernel}
	o := Options{
		Name: "unit", OutDir: filepath.Join(t.TempDir(), "out", "images"), Kernels: []string{testKernel},
		Rootfs: rootfs.Options{
			CloudInit: true, EmptyRootPassword: true, Enable: []string{"extra.service"}, CacheDir: t.TempDir(),
		},
		Stage: stage.Options{
			DownloadDir: t.TempDir(), CacheDir: t.TempDir(),
			Lister: recipe.ListerFunc(func() ([]string, error) { return []string{testKernel}, nil }),
		},
		Boot:    bootloader.Options{Loader: install.GRUB},
		Disk:    disk.Options{SizeMB: 600, ESPSizeMB: 64},
		Formats: []string{formats.Raw, formats.QCOW2, formats.GCE},
		Plain:   true, TempDir: t.TempDir(), BuiltWith: "unit",
	}
	if edit != nil {
		edit(&o)
	}
	j := NewJob(o)
	j.Tools = NewTools(f)
	return j, j.Options()
}

// TestJobWithFakeTools runs every phase of a plain GRUB image with the tools
// faked: the command lines each phase gives its tools, the disk's boot code
// and the outputs moved into place.
func TestJobWithFakeTools(t *testing.T) {
	f := &fakeRunner{}
	var msgs []string
	j, o := fakeJob(t, f, func(o *Options) { o.Progress = func(m string) { msgs = append(msgs, m) } })
	if err := RunPhases(context.Background(), j.Phases()); err != nil {
		t.Fatal(err)
	}
	m := j.Manifest()
	if m == nil {
		t.Fatal("no manifest after the last phase")
	}
	if got, want := m.KernelPackages[testKernel], "6.1.158-1"; got != want {
		t.Errorf("kernel package version = %q, want %q", got, want)
	}
	if got, want := m.BootFirmware, []string{formats.BootBIOS, formats.BootUEFI}; !slices.Equal(got, want) {
		t.Errorf("boot firmware = %q, want %q", got, want)
	}
	var written []string
	for _, fl := range m.Files {
		written = append(written, fl.Format)
		if _, err := os.Stat(fl.Path); err != nil {
			t.Errorf("output %s: %v", fl.Format, err)
		}
	}
	if got, want := written, o.Formats; !slices.Equal(got, want) {
		t.Errorf("manifest formats = %q, want %q", got, want)
	}
	back, err := ReadManifest(OutputPath(o.OutDir, o.Name, "manifest.json"))
	if err != nil || back.RootUUID != m.RootUUID {
		t.Errorf("ReadManifest = %+v, %v; want the manifest written", back, err)
	}

	for _, want := range []string{
		"mmdebstrap --variant=minbase",
		"tar -x -p --numeric-owner",
		"dpkg-query --admindir=",
		"systemctl --root=" + j.root + " enable systemd-networkd.service",
		"systemctl --root=" + j.root + " enable " + rootfs.SSHHostKeysUnitName,
		"systemctl --root=" + j.root + " enable extra.service",
		j.root + ": grub-mkimage -O i386-pc",
		j.root + ": grub-mkconfig -o /" + install.GrubConfig,
		"sfdisk --quiet --no-reread --no-tell-kernel " + filepath.Join(j.outTmp, "unit.raw"),
		"mkfs.vfat -F 32 -s 1 -n ESP -i ",
		"mmd -i ",
		"mcopy -o -i ",
		"mkfs.ext4 -q -F -O verity -b 4096 -L root -U " + m.RootUUID,
		"qemu-img convert -f raw -O qcow2",
		"sfdisk --quiet --no-reread --no-tell-kernel --relocate gpt-bak-std",
		"tar --format=gnu",
	} {
		if len(f.ran(want)) == 0 {
			t.Errorf("no command %q; ran:\n%s", want, strings.Join(f.cmds, "\n"))
		}
	}
	if got := f.ran("dpkg-deb"); len(got) != 0 {
		t.Errorf("a plain image built the stand-in initramfs tool: %q", got)
	}
	if got := f.ran("systemctl --root=" + j.root + " preset"); len(got) != 0 {
		t.Errorf("a plain image preset kpreload's units: %q", got)
	}
	if !strings.Contains(f.stdin["sfdisk"], "label-id: "+m.DiskGUID) || !strings.Contains(f.stdin["sfdisk"], disk.TypeBIOSBoot) {
		t.Errorf("sfdisk's script %q: want the disk GUID and a BIOS boot partition", f.stdin["sfdisk"])
	}
	if !strings.Contains(f.probe, "fs_uuid) echo "+m.RootUUID) {
		t.Errorf("grub-probe while grub-mkconfig ran = %q, want the build's shim for root %s", f.probe, m.RootUUID)
	}
	for _, want := range []string{"EFI/BOOT/BOOTX64.EFI", "EFI/BOOT/grubx64.efi", "EFI/debian/grub.cfg"} {
		if len(f.ran("mcopy")) == 0 || !slices.ContainsFunc(f.ran("mcopy"), func(c string) bool { return strings.HasSuffix(c, "::/"+want) }) {
			t.Errorf("nothing copied to the ESP's %s", want)
		}
	}
	// boot.img in the MBR points at core.img in the BIOS boot partition
	// (its LBA at 0x5c, as grub-bios-setup writes it). Only the MBR is read:
	// the rest of the 600 MiB disk is a hole, costly to read for nothing.
	raw, err := os.Open(OutputPath(o.OutDir, o.Name, formats.Raw))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	mbr := make([]byte, disk.SectorSize)
	if _, err := io.ReadFull(raw, mbr); err != nil {
		t.Fatal(err)
	}
	if got, want := binary.LittleEndian.Uint64(mbr[0x5c:]), uint64(disk.MiB/disk.SectorSize); got != want {
		t.Errorf("boot.img's core.img sector = %d, want %d", got, want)
	}
	if len(msgs) == 0 || !strings.HasPrefix(msgs[len(msgs)-1], "image unit done") {
		t.Errorf("progress = %q, want it to end with the image done", msgs)
	}
	// Nothing of the build is left but the outputs.
	if ents, _ := os.ReadDir(o.TempDir); len(ents) != 0 {
		t.Errorf("work directory left in TempDir: %v", ents)
	}
	ents, _ := os.ReadDir(o.OutDir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if got, want := strings.Join(names, " "), "unit.manifest.json unit.qcow2 unit.raw unit.tar.gz"; got != want {
		t.Errorf("OutDir holds %q, want %q", got, want)
	}

	// A second build the same day takes the cached root filesystem tarball
	// (written as qcow2 alone: the outputs' digests read every byte of the
	// disks, and only the root filesystem matters here).
	f2 := &fakeRunner{}
	j2, _ := fakeJob(t, f2, func(o2 *Options) { o2.Rootfs.CacheDir, o2.Formats = o.Rootfs.CacheDir, []string{formats.QCOW2} })
	if err := RunPhases(context.Background(), j2.Phases()); err != nil {
		t.Fatal(err)
	}
	if !j2.Manifest().Rootfs.Cached || len(f2.ran("mmdebstrap")) != 0 {
		t.Errorf("second build: cached = %v, mmdebstrap ran %q; want the cached tarball", j2.Manifest().Rootfs.Cached, f2.ran("mmdebstrap"))
	}
}

// TestJobToolFailure checks that a failing tool fails its phase with the
// tool's words, and that the build leaves no output and no work directory.
func TestJobToolFailure(t *testing.T) {
	for _, tt := range []struct {
		fail    string // the command line that fails
		missing string // a program LookPath does not find
		wantErr string
	}{
		{fail: "mmdebstrap", wantErr: "rootfs: mmdebstrap --variant=minbase"},
		{fail: "tar -x -p", wantErr: "rootfs: unpack"},
		{fail: "dpkg-query", wantErr: "kernel " + testKernel + " is not installed in the root filesystem"},
		{fail: "enable systemd-networkd.service", wantErr: "configure root: enable systemd-networkd"},
		{fail: "enable " + rootfs.SSHHostKeysUnitName, wantErr: "identity: enable"},
		{fail: "enable extra.service", wantErr: "enable extra.service"},
		{fail: "grub-mkimage", wantErr: "GRUB i386-pc image"},
		{fail: "grub-mkconfig", wantErr: "grub: grub-mkconfig in the sandbox of"},
		{fail: "unit.raw", wantErr: "disk: sfdisk"},
		{fail: "mkfs.vfat", wantErr: "disk: ESP: mkfs.vfat"},
		{fail: "mmd ", wantErr: "disk: ESP: mmd"},
		{fail: "mcopy", wantErr: "disk: ESP: mcopy"},
		{fail: "mkfs.ext4", wantErr: "disk: root filesystem: mkfs.ext4"},
		{fail: "qemu-img", wantErr: "disk: qcow2: qemu-img convert"},
		{fail: "sfdisk --quiet --no-reread --no-tell-kernel --relocate", wantErr: "move the backup GPT"},
		{fail: "tar --format=gnu", wantErr: "disk: gce: tar"},
		{missing: "mkfs.ext4", wantErr: "mkfs.ext4 is missing"},
		{missing: "mmdebstrap", wantErr: "mmdebstrap is missing"},
	} {
		t.Run(tt.fail+tt.missing, func(t *testing.T) {
			f := &fakeRunner{fail: tt.fail}
			if tt.missing != "" {
				f.missing = []string{tt.missing}
			}
			j, o := fakeJob(t, f, func(o *Options) { o.Rootfs.CacheDir = "off" })
			err := RunPhases(context.Background(), j.Phases())
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
			}
			if tt.fail != "" && !strings.Contains(err.Error(), "fake failure") {
				t.Errorf("error = %v, want the tool's last words", err)
			}
			if ents, _ := os.ReadDir(o.TempDir); len(ents) != 0 {
				t.Errorf("work directory left in TempDir: %v", ents)
			}
			if _, err := os.Stat(filepath.Dir(o.OutDir)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("output directory %s left behind: %v", o.OutDir, err)
			}
		})
	}
}

// TestJobCancelledInTool checks that a context cancelled while a tool runs
// fails the phase with ctx's error.
func TestJobCancelledInTool(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &fakeRunner{}
	j, _ := fakeJob(t, f, nil)
	phases := j.Phases()
	for i, p := range phases {
		if p.Name == PhaseDisk {
			run := p.Run
			phases[i].Run = func(ctx context.Context) error { cancel(); return run(ctx) }
		}
	}
	err := RunPhases(ctx, phases)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want context.Canceled", err)
	}
	if j.Manifest() != nil {
		t.Error("a cancelled job has a manifest")
	}
}

// TestJobKpreloadSystemdBoot runs the phases of a kpreload image booted by
// systemd-boot, with the tools faked: kpreload's files and initramfs staged
// into the root, its units preset, the extra files copied in, one loader
// entry per kernel on the ESP.
func TestJobKpreloadSystemdBoot(t *testing.T) {
	dir := t.TempDir()
	extra := filepath.Join(dir, "extra.conf")
	instance := filepath.Join(dir, "instance.yaml")
	// Stand-ins for the static binaries: the build copies them, never runs them.
	kpreload, initBin := filepath.Join(dir, "kpreload"), filepath.Join(dir, "kpreload-init")
	for _, p := range []string{extra, instance, kpreload, initBin} {
		if err := os.WriteFile(p, []byte("# test\n"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	f := &fakeRunner{}
	j, o := fakeJob(t, f, func(o *Options) {
		o.Plain, o.Rootfs.CloudInit, o.Boot.Loader = false, false, install.SystemdBoot
		o.Stage.KpreloadBinary, o.Stage.InitBinary, o.Stage.Instance = kpreload, initBin, instance
		o.Rootfs.Files = map[string]string{"/etc/extra/extra.conf": extra}
		o.Formats = []string{formats.QCOW2}
	})
	if err := RunPhases(context.Background(), j.Phases()); err != nil {
		t.Fatal(err)
	}
	m := j.Manifest()
	if len(m.Initramfs) != 1 || m.Initramfs[0].Kernel != testKernel {
		t.Errorf("initramfs = %+v, want one for %s", m.Initramfs, testKernel)
	}
	if got, want := m.BootFirmware, []string{formats.BootUEFI}; !slices.Equal(got, want) {
		t.Errorf("boot firmware = %q, want %q", got, want)
	}
	for _, want := range []string{
		"dpkg-deb --root-owner-group --build",
		"systemctl --root=" + j.root + " preset kpreload-",
		"mcopy -o -i ",
	} {
		if len(f.ran(want)) == 0 {
			t.Errorf("no command %q; ran:\n%s", want, strings.Join(f.cmds, "\n"))
		}
	}
	for _, want := range []string{install.ESPBootloader, "loader/entries/kpreload-" + testKernel + ".conf", "kpreload/" + testKernel + "/initrd.img"} {
		if !slices.ContainsFunc(f.ran("mcopy"), func(c string) bool { return strings.Contains(c, want) }) {
			t.Errorf("nothing copied to the ESP's %s:\n%s", want, strings.Join(f.ran("mcopy"), "\n"))
		}
	}
	if got := f.ran(j.root + ": grub-"); len(got) != 0 {
		t.Errorf("a systemd-boot image ran GRUB's tools: %q", got)
	}
	if len(o.Rootfs.Files) != 1 {
		t.Errorf("options files = %v", o.Rootfs.Files)
	}
}

// TestRunPhases checks the order of Run and Cleanup, the failed flag and
// cancellation between phases.
func TestRunPhases(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name       string
		failAt     string // the phase whose Run fails
		cancelAt   string // the phase whose Run cancels the context (and succeeds)
		wantLog    []string
		wantFailed bool
		wantErr    string
	}{
		{"all succeed", "", "", []string{"run a", "run b", "run c", "clean c", "clean b", "clean a"}, false, ""},
		{"b fails", "b", "", []string{"run a", "run b", "clean b", "clean a"}, true, "boom"},
		{"cancelled in b", "", "b", []string{"run a", "run b", "clean b", "clean a"}, true, "cancelled before c: context canceled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var log []string
			failed := map[string]bool{}
			var phases []Phase
			for _, name := range []string{"a", "b", "c"} {
				phases = append(phases, Phase{
					Name: name,
					Run: func(context.Context) error {
						log = append(log, "run "+name)
						if name == tt.cancelAt {
							cancel()
						}
						if name == tt.failAt {
							return boom
						}
						return nil
					},
					Cleanup: func(f bool) {
						log = append(log, "clean "+name)
						failed[name] = f
					},
				})
			}
			err := RunPhases(ctx, phases)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("RunPhases error = %v, want %q", err, tt.wantErr)
			}
			if !slices.Equal(log, tt.wantLog) {
				t.Errorf("got %q, want %q", log, tt.wantLog)
			}
			for name, got := range failed {
				if got != tt.wantFailed {
					t.Errorf("phase %s cleaned up with failed = %v, want %v", name, got, tt.wantFailed)
				}
			}
		})
	}
}

// TestJobPhases checks the phases' names and order, and that each phase
// lives in its own file, phase_<name>.go, with its test beside it.
func TestJobPhases(t *testing.T) {
	var got []string
	for _, p := range NewJob(Options{}).Phases() {
		got = append(got, p.Name)
		if p.Run == nil || p.Cleanup == nil || p.Title == "" {
			t.Errorf("phase %s: Run, Cleanup and Title must be set", p.Name)
		}
		for _, f := range []string{"phase_" + p.Name + ".go", "phase_" + p.Name + "_test.go"} {
			if _, err := os.Stat(f); err != nil {
				t.Errorf("phase %s: %v", p.Name, err)
			}
		}
	}
	want := []string{PhasePrepare, PhaseDrivers, PhaseRootfs, PhaseInitramfs, PhaseConfigure, PhaseBootloader, PhaseDisk, PhaseFormats}
	if !slices.Equal(got, want) {
		t.Errorf("phases %q, want %q", got, want)
	}
}

// runThrough runs j's phases up to and including name, stopping at the first
// that fails, and registers the Cleanup of each that ran for the end of the
// test (in reverse order, failed set), so that the test can look at what the
// phases made before it goes.
func runThrough(t *testing.T, j *Job, name string) error {
	t.Helper()
	for _, p := range j.Phases() {
		t.Cleanup(func() { p.Cleanup(true) })
		if err := p.Run(context.Background()); err != nil {
			return err
		}
		if p.Name == name {
			return nil
		}
	}
	t.Fatalf("no phase %q", name)
	return nil
}

// dirEntries returns the names in dir (none when it is missing).
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}
