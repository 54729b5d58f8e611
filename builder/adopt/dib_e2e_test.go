package adopt

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/report"
	"github.com/kpreload/kpreload/testsupport/dibtest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// rootPartition is the partition of img that install --stage --image
// mounts as the root (the whole file where it has no partition table).
func rootPartition(t *testing.T, img string) Partition {
	t.Helper()
	fi, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	p, err := findRoot(context.Background(), img, fi.Size(), 0, runner.Default)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDiskImageBuilder adopts an image diskimage-builder made (Debian 12,
// its generic kernel, GRUB on BIOS, console=ttyS0 in
// GRUB_CMDLINE_LINUX_DEFAULT, a serial getty) with the command install
// --help shows; inside the root, Debian's update-initramfs -u -k all and
// update-grub keep kpreload the default with its driver, and so does apt
// installing another kernel package (the cloud kernel, for which the cache
// has no cells); the distribution's entry stays as the way back. Then it
// boots under SeaBIOS through its own GRUB: kpreload's /init ran, the test
// driver was bound before systemd, the boot ended on the line kpreload's own
// unit writes once the default target is reached (kpreload-up.service's
// record on the report channel /init used, which QEMU's fw_cfg named, not
// the console's login prompt) and boot-ok took GRUB's one-shot fallback
// back.
func TestDiskImageBuilder(t *testing.T) {
	testenv.SkipShort(t, "builds (once per machine) and boots a diskimage-builder image")
	if os.Getuid() != 0 {
		t.Fatal("this test needs root (diskimage-builder, loop mounts, chroot)")
	}
	t.Parallel() // its image build beside vmdb2's: see adoptBoots
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 40*time.Minute))
	defer cancel()
	start := time.Now()
	cached := dibtest.Image(ctx, t)
	adoptBoots.Lock()
	defer adoptBoots.Unlock()
	adoptBootUpdate(ctx, t, cached)
	t.Logf("whole test: %s", time.Since(start).Round(time.Second))
}

// adoptBoots lets one of TestDiskImageBuilder and TestVmdb2 at a time adopt
// and boot its image. The two run in parallel so that the other tools' image
// builds, each once per machine and each about ten minutes on a cold
// machine (debootstrap and dpkg, waiting on the disk more than using a
// CPU), overlap instead of following each other; what comes after (the
// test driver's dkms build, install --stage, a TCG boot) takes turns.
var adoptBoots sync.Mutex

// adoptBootUpdate is what TestDiskImageBuilder and TestVmdb2 prove on a copy
// of the raw disk image cached, another tool's Debian 12 image with Debian's
// generic kernel, GRUB on BIOS and a serial console in
// GRUB_CMDLINE_LINUX_DEFAULT: install --stage with the command install
// --help shows, then Debian's update-initramfs -u -k all, update-grub and
// apt installing another kernel package inside the root, and one boot
// through the image's own GRUB under SeaBIOS, after all of them, to the
// default target with the driver bound before systemd and the fallback
// taken back. One boot proves what the tools left: a boot before them would
// prove a subset of it.
func adoptBootUpdate(ctx context.Context, t *testing.T, cached string) {
	t.Helper()
	work := t.TempDir()
	img := filepath.Join(work, "debian.raw")
	dibtest.Copy(t, cached, img)
	kernel := dibtest.KernelAt(t, img, rootPartition(t, img).Offset)
	t.Logf("the image's kernel: %s", kernel)

	// The test driver's cells for the image's kernel, built with the real dkms.
	testenv.KernelTree(t, kernel)
	repo := testenv.RepoRoot(t)
	r, err := recipe.Load(filepath.Join(repo, "recipes", "testdriver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(work, "cache")
	if _, err := matrix.Run(ctx, matrix.Options{Recipes: []*recipe.Recipe{r}, Kernels: []string{kernel}, CacheDir: cache}); err != nil {
		t.Fatalf("build the test driver for %s: %v", kernel, err)
	}
	bins := t.TempDir()
	bin := testenv.GoBuildStatic(t, bins, "kpreload", "./cmd/kpreload")
	testenv.GoBuildStatic(t, bins, "kpreload-init", "./cmd/kpreload-init")
	if err := os.Symlink(filepath.Join(repo, "recipes"), filepath.Join(work, "recipes")); err != nil {
		t.Fatal(err)
	}

	// The command exactly as install --help shows it, run where the image is.
	helpOut, err := exec.Command(bin, "install", "--help").Output()
	if err != nil {
		t.Fatal(err)
	}
	example := "sudo kpreload install --stage --image debian.raw --recipe testdriver"
	if !strings.Contains(string(helpOut), example) {
		t.Fatalf("install --help no longer shows %q", example)
	}
	args := strings.Fields(example)[2:]
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "KPRELOAD_CACHE_DIR="+cache)
	stageStart := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("kpreload %s (%s):\n%s", strings.Join(args, " "), time.Since(stageStart).Round(time.Second), out)
	if err != nil {
		t.Fatalf("install --stage: %v", err)
	}
	for _, want := range []string{"kpreload staged into debian.raw for [" + kernel + "]", "grub boots kernel " + kernel + " with kpreload by default (the newest kernel with its driver cells)", "grub-probe's \"failed to get canonical path of ...\" above, and the usage lines after each, are harmless", "kpreload-boot-ok.service", "kpreload-up.service", "driver kpreload-edu 1.0.0 (testdriver) for " + kernel} {
		if !strings.Contains(string(out), want) {
			t.Errorf("install --stage output lacks %q", want)
		}
	}

	// Debian's own tools in the root: update-initramfs and apt-get in a
	// chroot, as the image's own system runs them; update-grub as kpreload
	// runs it, in the root's sandbox.
	root, unmount, err := Mount(ctx, img, ImageOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unmount()
	checkGrub(t, root, kernel)
	var log strings.Builder
	if _, err := runner.Default.Run(ctx, runner.Cmd{Name: "chroot", Args: []string{root, "update-initramfs", "-u", "-k", "all"},
		Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, Log: &log}); err != nil {
		t.Fatalf("update-initramfs -u -k all: %v\n%s", err, log.String())
	}
	if err := install.UpdateGrub(ctx, root, &log); err != nil {
		t.Fatalf("update-grub: %v\n%s", err, log.String())
	}
	t.Logf("update-initramfs -u -k all; update-grub:\n%s", log.String())
	checkGrub(t, root, kernel)

	// Another kernel package, installed by apt in the root: its kpreload
	// initramfs and entry come from kpreload's hook, but the default stays
	// on the kernel with the driver's cells (the cache has none for it).
	other := strings.TrimSuffix(kernel, "-amd64") + "-cloud-amd64"
	log.Reset()
	restore := hostResolver(t, root)
	for _, argv := range [][]string{{"apt-get", "update"}, {"apt-get", "install", "-y", "--no-install-recommends", "linux-image-" + other}} {
		if _, err := runner.Default.Run(ctx, runner.Cmd{Name: "chroot", Args: append([]string{root}, argv...),
			Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive"}, Log: &log}); err != nil {
			t.Fatalf("%s in the root: %v\n%s", strings.Join(argv, " "), err, log.String())
		}
	}
	restore()
	out2 := log.String()
	t.Logf("apt-get install linux-image-%s:\n%s", other, out2)
	for _, want := range []string{"the module cache has no driver cell for kernel " + other, "with kpreload by default (the newest kernel with its driver cells)"} {
		if !strings.Contains(out2, want) {
			t.Errorf("the kernel package's install lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(root, install.InitramfsPath(other))); err != nil {
		t.Errorf("no kpreload initramfs for %s: %v", other, err)
	}
	checkGrub(t, root, kernel)
	if err := unmount(); err != nil {
		t.Fatal(err)
	}

	// One boot, after every tool above ran: kpreload boot's defaults end it
	// when the image is up, which kpreload's own unit says on the report
	// channel once the default target (multi-user or graphical) is reached.
	res := dibtest.Boot(ctx, t, bin, img, 1)
	dibtest.CheckBoundBeforeSystemd(t, 1, res, kernel, install.FallbackFlag)
	if !strings.HasPrefix(res.Up, "kpreload-up.service reported the system up (") || !strings.HasPrefix(res.UntilMatch, report.UpPrefix) {
		t.Errorf("the boot ended by %q (%s), want kpreload-up.service's record on the report channel", res.UntilMatch, res.Up)
	}
	if res.Report.Channel != qemu.ReportDevice {
		t.Errorf("/init's report names channel %q, want %s (QEMU's fw_cfg named it)", res.Report.Channel, qemu.ReportDevice)
	}
	// kpreload-boot-ok.service said, early, that the record would come:
	// what kept the console's login prompt from ending the run first.
	if log, err := os.ReadFile(res.ReportLog); err != nil {
		t.Errorf("report channel log: %v", err)
	} else if booting, up, _ := report.ScanUp(log); booting == nil || up == nil || booting.Time >= up.Time {
		t.Errorf("report channel %s holds booting record %+v and up record %+v: want kpreload-boot-ok.service's, then kpreload-up.service's", res.ReportLog, booting, up)
	} else if up.Target != "multi-user.target" && up.Target != "graphical.target" {
		t.Errorf("kpreload-up.service reported target %q, want multi-user.target or graphical.target", up.Target)
	}
	// Read once the kernel's mount has replayed the journal: boot-ok's
	// write may still be only there when QEMU is stopped.
	root, unmount, err = Mount(ctx, img, ImageOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unmount()
	if env, err := os.ReadFile(filepath.Join(root, install.GrubEnvFile)); err != nil || !strings.Contains(string(env), "# GRUB Environment Block") || strings.Contains(string(env), "next_entry=kpreload") {
		t.Errorf("after the boot, grubenv (%v) still holds kpreload's one-shot fallback (kpreload-boot-ok.service did not take it back):\n%.300s", err, env)
	}
}

// checkGrub: grub.cfg's default entry is kpreload's for kernel, booting its
// initramfs and arming the one-shot fallback to the distribution's entry,
// which is there with the distribution's initramfs, as are Debian's own.
func checkGrub(t *testing.T, root, kernel string) {
	t.Helper()
	if err := install.CheckGrubConfig(root, kernel); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(root, install.GrubConfig))
	if err != nil {
		t.Fatal(err)
	}
	s := string(cfg)
	entry := s[strings.Index(s, "'"+install.GrubEntryID(kernel)+"'"):]
	entry = entry[:strings.Index(entry, "\n}")]
	for _, want := range []string{
		"set next_entry='" + install.GrubDistributionEntryID(kernel) + "'",
		"/boot/kpreload/initrd.img-" + kernel,
		"console=ttyS0", // GRUB_CMDLINE_LINUX_DEFAULT, where diskimage-builder and vmdb2 put it
	} {
		if !strings.Contains(entry, want) {
			t.Errorf("kpreload's default GRUB entry lacks %q:\n%s", want, entry)
		}
	}
	if !strings.Contains(s, "'"+install.GrubDistributionEntryID(kernel)+"'") || !strings.Contains(s, "initrd\t/boot/initrd.img-"+kernel) {
		t.Errorf("grub.cfg lacks the distribution's entry (the way back)")
	}
	if _, err := os.Stat(filepath.Join(root, "boot/initrd.img-"+kernel)); err != nil {
		t.Errorf("the distribution's initramfs: %v", err)
	}
}

// hostResolver gives the root this machine's /etc/resolv.conf for apt (an
// image's own may point at a resolver that only runs when it boots) and
// returns what puts the root's own back.
func hostResolver(t *testing.T, root string) (restore func()) {
	t.Helper()
	p := filepath.Join(root, "etc/resolv.conf")
	saved := filepath.Join(t.TempDir(), "resolv.conf")
	had := exec.Command("cp", "-a", p, saved).Run() == nil
	os.Remove(p)
	host, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, host, 0o644); err != nil {
		t.Fatal(err)
	}
	return func() {
		os.Remove(p)
		if had {
			if out, err := exec.Command("cp", "-a", saved, p).CombinedOutput(); err != nil {
				t.Errorf("restore the root's resolv.conf: %v: %s", err, out)
			}
		}
	}
}
