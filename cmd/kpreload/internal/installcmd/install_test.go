package installcmd

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestGrubEntriesNeverFails: grub-entries runs inside grub-mkconfig, which
// must finish with the distribution's entries: a bad boot.yaml is a warning
// (the entries still come, by the default policy), a root it cannot read
// is a warning and no entry; the exit status is 0 either way.
func TestGrubEntriesNeverFails(t *testing.T) {
	const k = "6.1.0-56-cloud-amd64"
	root := t.TempDir()
	for p, s := range map[string]string{
		"boot/vmlinuz-" + k: "k", "boot/kpreload/initrd.img-" + k: "i", "etc/kpreload/boot.yaml": "default: [\nbogus",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := runCLI("kernel-hook", "grub-entries", "--root", root)
	if code != 0 || !strings.Contains(out, "menuentry '") || !strings.Contains(errOut, filepath.Join(root, "etc/kpreload/boot.yaml")) {
		t.Errorf("grub-entries with a bad boot.yaml: exit %d\nstdout %s\nstderr %s\nwant 0, the entries, a warning naming the file", code, out, errOut)
	}
	code, out, errOut = runCLI("status", "--root", root)
	if code != 0 || !strings.Contains(errOut, "WARNING") || !strings.Contains(out, "default: "+k) {
		t.Errorf("status with a bad boot.yaml: exit %d\nstdout %s\nstderr %s\nwant 0, the default kernel, a warning", code, out, errOut)
	}
	// /boot is a file: the kernels cannot be listed.
	if err := os.RemoveAll(filepath.Join(root, "boot")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "boot"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI("kernel-hook", "grub-entries", "--root", root)
	if code != 0 || out != "" || !strings.Contains(errOut, "WARNING") {
		t.Errorf("grub-entries on an unreadable /boot: exit %d\nstdout %q\nstderr %s\nwant 0, nothing printed, a warning", code, out, errOut)
	}
}

// TestInstallRootFilesystem: a root whose filesystem cannot be told (a
// directory on tmpfs) is refused, naming the filesystem and the flag that
// names the one it boots from; that flag takes only filesystems /init mounts.
func TestInstallRootFilesystem(t *testing.T) {
	root := t.TempDir()
	if err := unix.Mount("kpreload-test", root, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount tmpfs: %v (this test needs root)", err)
	}
	t.Cleanup(func() { unix.Unmount(root, 0) })
	if err := os.MkdirAll(filepath.Join(root, "boot/efi/loader"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "boot/efi/loader/loader.conf"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCLI("install", "--root", root, "--kernel", "6.1.0-56-cloud-amd64")
	if code == 0 || !strings.Contains(errOut, "tmpfs") || !strings.Contains(errOut, "--root-filesystem") {
		t.Errorf("install into a root on tmpfs: exit %d, stderr %s\nwant a failure naming tmpfs and --root-filesystem", code, errOut)
	}
	code, _, errOut = runCLI("install", "--root", root, "--kernel", "6.1.0-56-cloud-amd64", "--root-filesystem", "zfs")
	if code == 0 || !strings.Contains(errOut, "--root-filesystem") || !strings.Contains(errOut, "btrfs, ext4, iso9660, vfat, xfs") {
		t.Errorf("install --root-filesystem zfs: exit %d, stderr %s\nwant a failure listing what /init mounts", code, errOut)
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "etc")); len(ents) > 0 {
		t.Errorf("refused installs wrote %v into the root's /etc", ents)
	}
}

// TestInstallHelpExamples runs the examples of install exactly as written
// (sudo dropped: the test owns what they change), each on a fresh
// ./image-root laid out as a kpreload image holds it (the 6.1 cloud kernel
// and its modules, the real /init, an empty module cache, systemd-boot's
// loader/ on the ESP at boot/efi and at ./esp): each builds the kernel's
// kpreload initramfs and makes the ESP's default entry boot it. The --stage
// example attaches a disk image: builder/adopt's adoptBootUpdate runs it,
// exactly as written, on its diskimage-builder image.
func TestInstallHelpExamples(t *testing.T) {
	const kver = "6.1.0-56-cloud-amd64"
	const stage = "kpreload install --stage --image debian.raw --recipe testdriver"
	tree := testenv.KernelTree(t, kver)
	init := testenv.GoBuildStatic(t, t.TempDir(), "kpreload-init", "./cmd/kpreload-init")
	t.Chdir(t.TempDir())
	lines := cli.ExamplesOf(t, "kpreload install")
	ran := 0
	for _, l := range lines {
		if l == stage {
			continue
		}
		for _, d := range []string{"image-root", "esp"} {
			if err := os.RemoveAll(d); err != nil {
				t.Fatal(err)
			}
		}
		for p, src := range map[string]string{"boot/vmlinuz-" + kver: filepath.Join(tree, "boot", "vmlinuz-"+kver), install.Init: init} {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			clitest.MustWrite(t, filepath.Join("image-root", p), string(b))
		}
		for p, s := range map[string]string{
			install.Cmdline:                          "root=UUID=0b0e0f0a-1111-4222-8333-444444444444 rw console=ttyS0\n",
			install.ESPMount + "/loader/loader.conf": "timeout 0\n", "../esp/loader/loader.conf": "timeout 0\n",
			install.CacheDir + "/index/.keep": "", install.BootOKUnit: "", "lib/.keep": "",
		} {
			clitest.MustWrite(t, filepath.Join("image-root", p), s)
		}
		if out, err := exec.Command("cp", "-a", filepath.Join(tree, "lib", "modules"), "image-root/lib/modules").CombinedOutput(); err != nil {
			t.Fatalf("copy the kernel's modules into the root: %v\n%s", err, out)
		}
		code, out, errOut := runCLI(strings.Fields(l)[1:]...)
		if code != 0 {
			t.Fatalf("example %q: exit %d: %s%s", l, code, out, errOut)
		}
		esp := "image-root/" + install.ESPMount
		if strings.Contains(l, "--esp ./esp") {
			esp = "esp"
			var res install.Result
			if err := json.Unmarshal([]byte(out), &res); err != nil || res.Bootloader != install.SystemdBoot || res.Default != kver {
				t.Errorf("example %q printed %s (%v); want systemd-boot, default %s", l, out, err, kver)
			}
		}
		if _, err := os.Stat(filepath.Join("image-root", install.InitramfsPath(kver))); err != nil {
			t.Errorf("example %q: no kpreload initramfs: %v", l, err)
		}
		conf, err := os.ReadFile(filepath.Join(esp, install.ESPLoaderConf))
		if err != nil || !strings.Contains("\n"+string(conf), "\ndefault kpreload-"+kver) {
			t.Errorf("example %q: %s/%s holds %q (%v), want the default on kpreload's entry of %s", l, esp, install.ESPLoaderConf, conf, err, kver)
		}
		ran++
	}
	if ran != 2 || !slices.Contains(lines, stage) {
		t.Errorf("install examples %q; the test knows 2 and %q", lines, stage)
	}
}
