package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/image"
	"github.com/kpreload/kpreload/builder/image/bootloader"
	"github.com/kpreload/kpreload/builder/image/disk"
	"github.com/kpreload/kpreload/builder/image/formats"
	"github.com/kpreload/kpreload/builder/image/rootfs"
	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/internal/version"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// The base image's non-root login user, as cloud images have one ("debian",
// "ubuntu", "ec2-user"): made at first boot by a unit that stands in for
// cloud-init, with the test's SSH key and passwordless sudo.
const (
	cloudUser   = "debian"
	makeUserSrc = `#!/bin/sh
set -e
id ` + cloudUser + ` >/dev/null 2>&1 && exit 0
useradd -m -s /bin/sh ` + cloudUser + `
install -d -m 700 -o ` + cloudUser + ` -g ` + cloudUser + ` /home/` + cloudUser + `/.ssh
install -m 600 -o ` + cloudUser + ` -g ` + cloudUser + ` /usr/local/share/kpreload-test/authorized_keys /home/` + cloudUser + `/.ssh/authorized_keys
echo '` + cloudUser + ` ALL=(ALL) NOPASSWD:ALL' >/etc/sudoers.d/` + cloudUser + `
chmod 440 /etc/sudoers.d/` + cloudUser + `
`
	makeUserUnit = `[Unit]
Description=kpreload test: the cloud image's login user (cloud-init's job on a cloud)
Before=ssh.service

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/kpreload-test-make-user

[Install]
WantedBy=multi-user.target
`
)

// What each boot of a provisioned image reports (not during the Packer
// build's own boot): GRUB's menu and kpreload-ready's state. What packages
// do to such an image later (update-initramfs -u -k all, update-grub,
// another kernel package) is proved inside another tool's image by
// builder/adopt's TestDiskImageBuilder and TestVmdb2, and on a running
// kpreload image by builder/follow/e2e, whose boots install kernels with
// apt-get; here, under TCG, it would add two minutes of the guest's
// mkinitramfs to what this test proves (the QEMU builder's provisioning).
const (
	updatesSrc = `#!/bin/sh
say() { echo "kpreload-test: $*"; }
grep -o "^menuentry '[^']*'" /boot/grub/grub.cfg | cut -d"'" -f2 | sed 's/^/kpreload-test: entry: /'
say "kpreload-ready $(systemctl is-active kpreload-ready.service)"
say done
`
	updatesUnit = `[Unit]
Description=kpreload test: what a provisioned image boots
ConditionPathExists=/usr/bin/kpreload
After=kpreload-drivers.target

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/kpreload-test-updates
StandardOutput=journal+console

[Install]
WantedBy=multi-user.target
`
)

// kpreloadReady is systemd reaching kpreload-drivers.target.
var kpreloadReady = regexp.MustCompile(`Reached target .*kpreload-dr.*GPU drivers loaded and ready`)

// packerMilestone picks the lines of `packer build -timestamp-ui` that show
// where the QEMU builder's time goes: the guest's boot up to SSH, the
// provisioner's own progress (host staging, upload, install in the guest),
// the shutdown.
var packerMilestone = regexp.MustCompile(`Starting VM|Waiting for SSH|Connected to SSH|qemu\.\w+: \[ *[0-9.]+s\]|kpreload: built|Generating grub|kpreload installed|Gracefully halting|finished after`)

// updatesDone is the updates step's last line.
var updatesDone = regexp.MustCompile(`kpreload-test: done`)

// TestProvisionerCloudBuilder is the path of every amazon-ebs, googlecompute
// and azure-arm user, with Packer's QEMU builder: a base image made like
// Debian's cloud images (GRUB for BIOS and UEFI, initramfs-tools, sshd, a
// non-root user with sudo, no kpreload) boots under TCG; Packer logs in as
// the non-root user; provisioner "kpreload" with use_sudo uploads the test
// driver's cells and runs kpreload install, which makes the VM's own GRUB
// boot kpreload's initramfs (the VM's real update-grub and grub-probe). The
// output disk then boots under SeaBIOS and under OVMF: both times with
// kpreload's entry first and the default, the distribution's initramfs one
// entry away, the driver bound before switch_root and kpreload-drivers.target
// reached.
func TestProvisionerCloudBuilder(t *testing.T) {
	if testing.Short() {
		t.Skip("mmdebstrap, a packer build with the QEMU builder and two TCG boots; -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 40*time.Minute))
	defer cancel()
	// Packer's QEMU builder is a plugin of its own since Packer 1.10:
	// scripts/packer.sh builds it from the module proxy and installs it.
	qemuPlugin(t)
	dir := t.TempDir()
	key := filepath.Join(dir, "id_ed25519")
	if b, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, b)
	}
	files := map[string]string{
		"/usr/local/share/kpreload-test/authorized_keys":      key + ".pub",
		"/usr/local/sbin/kpreload-test-make-user":             write(t, dir, "make-user", makeUserSrc, 0o755),
		"/etc/systemd/system/kpreload-test-make-user.service": write(t, dir, "make-user.service", makeUserUnit, 0o644),
		"/usr/local/sbin/kpreload-test-updates":               write(t, dir, "updates", updatesSrc, 0o755),
		"/etc/systemd/system/kpreload-test-updates.service":   write(t, dir, "updates.service", updatesUnit, 0o644),
	}

	// The base image: no kpreload in it.
	cmdline := "console=ttyS0 panic=-1 kpreload.report=" + qemu.ReportDevice
	start := time.Now()
	base, err := image.Build(ctx, image.Options{
		Name: "base", OutDir: filepath.Join(dir, "base"), Kernels: []string{testKernel},
		Plain: true,
		Rootfs: rootfs.Options{
			Packages: []string{"openssh-server", "sudo"},
			Files:    files, Enable: []string{"kpreload-test-make-user.service", "kpreload-test-updates.service"},
		},
		Boot:     bootloader.Options{Loader: install.GRUB, Cmdline: cmdline},
		Disk:     disk.Options{SizeMB: 2048, ESPSizeMB: 64},
		Formats:  []string{formats.QCOW2},
		TempDir:  t.TempDir(),
		Progress: func(msg string) { t.Logf("[%6.1fs] base: %s", time.Since(start).Seconds(), msg) },
	})
	if err != nil {
		t.Fatalf("base image: %v", err)
	}
	if len(base.Drivers) != 0 || len(base.Initramfs) != 0 {
		t.Fatalf("the plain base image carries kpreload: drivers %+v, initramfs %+v", base.Drivers, base.Initramfs)
	}

	out := filepath.Join(dir, "out")
	console := filepath.Join(dir, "packer-console.log")
	tmpl := filepath.Join(dir, "cloud.pkr.hcl")
	if err := os.WriteFile(tmpl, []byte(fmt.Sprintf(`
packer {
  required_plugins {
    qemu = {
      source  = "github.com/hashicorp/qemu"
      version = "%s"
    }
    kpreload = {
      source  = "github.com/kpreload/kpreload"
      version = ">= %s"
    }
  }
}

source "qemu" "cloud" {
  disk_image           = true
  iso_url              = %q
  iso_checksum         = "none"
  skip_resize_disk     = true
  skip_compaction      = true # no qemu-img convert of the output: nothing here checks its size
  format               = "qcow2"
  accelerator          = "tcg"
  headless             = true
  memory               = 1024
  cpus                 = 2
  disk_interface       = "virtio"
  net_device           = "virtio-net"
  ssh_username         = %q
  ssh_private_key_file = %q
  ssh_timeout          = "15m"
  shutdown_command     = "sudo -n poweroff"
  output_directory     = %q
  vm_name              = "gpu.qcow2"
  qemuargs             = [["-serial", "file:%s"]]
}

build {
  sources = ["source.qemu.cloud"]

  provisioner "kpreload" {
    kernels       = [%q]
    recipes       = ["testdriver"]
    recipes_dir   = %q
    cache_dir     = %q
    instance_file = %q
    use_sudo      = true
  }
}
`, QEMUPluginVersion, version.Release, base.Files[0].Path, cloudUser, key, out, console, testKernel, filepath.Join(repoRoot(t), "recipes"),
		moduleCache(t), filepath.Join(repoRoot(t), "images", "instance-testdriver.yaml"))), 0o644); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	pout, err := packerRun(ctx, t, "build", "-timestamp-ui", tmpl)
	if err != nil {
		c, _ := os.ReadFile(console)
		t.Fatalf("packer build: %v\n%s\nguest console (last lines):\n%s", err, lastLines(pout, 60), lastLines(string(c), 30))
	}
	t.Logf("packer build with the QEMU builder took %s", time.Since(start).Round(time.Second))
	for _, l := range strings.Split(pout, "\n") {
		if packerMilestone.MatchString(l) {
			t.Log(strings.TrimSpace(l))
		}
	}
	for _, want := range []string{
		"Using SSH communicator to connect", "upload kpreload.tar.gz",
		"kpreload: built /boot/kpreload/initrd.img-" + testKernel,
		"grub boots kernel " + testKernel + " with kpreload by default",
		"kpreload installed on the target",
	} {
		if !strings.Contains(pout, want) {
			t.Errorf("packer output lacks %q:\n%s", want, lastLines(pout, 60))
		}
	}

	// Both boots start kpreload's initramfs by default, with the
	// distribution's one entry away.
	disk := filepath.Join(out, "gpu.qcow2")
	for _, fw := range []string{qemu.FirmwareBIOS, qemu.FirmwareUEFI} {
		res, err := (&qemu.Runner{WorkDir: t.TempDir()}).Run(ctx, qemu.Config{
			Firmware: fw, RootDisk: disk, Snapshot: true,
			Devices: []string{"edu"}, Until: updatesDone, Timeout: testenv.Deadline(t, 420*time.Second),
		})
		if err != nil {
			t.Fatalf("%s boot of the provisioned image: %v", fw, err)
		}
		t.Logf("%s: reached %q in %s", fw, res.UntilMatch, res.Duration.Round(time.Second))
		checkDriverBound(t, res, testKernel, "root=UUID="+base.RootUUID+" ro "+cmdline)
		c, _ := os.ReadFile(res.Console)
		for _, l := range strings.Split(string(c), "\n") {
			if j := strings.Index(l, "kpreload-test: "); j >= 0 {
				t.Logf("%s: %s", fw, strings.TrimSpace(l[j:]))
			}
		}
		wants := []string{
			"Booting `Debian GNU/Linux, with Linux " + testKernel + " (kpreload)'",
			"kpreload-test: entry: Debian GNU/Linux, with Linux " + testKernel + " (distribution initramfs)",
			"kpreload-test: kpreload-ready active",
		}
		if !kpreloadReady.Match(c) {
			t.Errorf("%s boot: systemd did not reach kpreload-drivers.target (%s)", fw, res.Console)
		}
		for _, want := range wants {
			if !strings.Contains(string(c), want) {
				t.Errorf("%s boot: console lacks %q (%s)", fw, want, res.Console)
			}
		}
		entries := regexp.MustCompile(`kpreload-test: entry: (.*)`).FindAllStringSubmatch(string(c), -1)
		if len(entries) == 0 || !strings.HasSuffix(strings.TrimSpace(entries[0][1]), "(kpreload)") {
			t.Errorf("%s boot: grub.cfg's first entry is %v, want kpreload's", fw, entries)
		}
	}
}

// write writes a file into dir and returns its path.
func write(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return p
}
