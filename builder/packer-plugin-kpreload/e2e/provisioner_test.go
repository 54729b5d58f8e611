package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/image"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

const testKernel = "6.1.0-56-cloud-amd64"

// startSSHD starts a private sshd on 127.0.0.1 (its own host key, config and
// authorized key, all in a temporary directory) and returns its port and the
// client key. It is stopped when the test ends.
func startSSHD(t *testing.T) (port int, key string) {
	t.Helper()
	sshd, err := exec.LookPath("sshd")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/sshd"); serr != nil {
			t.Fatalf("no sshd (the provisioner test runs Packer's SSH communicator against a private sshd): install openssh-server (scripts/deps.sh)")
		}
		sshd = "/usr/sbin/sshd"
	}
	dir := t.TempDir()
	key = filepath.Join(dir, "client_key")
	hostKey := filepath.Join(dir, "host_key")
	for _, k := range []string{key, hostKey} {
		if b, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", k).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v\n%s", err, b)
		}
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), pub, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	conf := filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %s
AuthorizedKeysFile %s
PidFile %s
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
`, port, hostKey, filepath.Join(dir, "authorized_keys"), filepath.Join(dir, "sshd.pid"))), 0o600); err != nil {
		t.Fatal(err)
	}
	// sshd's privilege separation directory.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sshd, "-D", "-e", "-f", conf)
	logf, err := os.Create(filepath.Join(dir, "sshd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sshd: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "sshd.log"))
			t.Fatalf("sshd did not listen on port %d: %v\n%s", port, err, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return port, key
}

// TestProvisionerOverSSH runs the real Packer with its built-in null builder
// and SSH communicator against a private sshd on this machine, and the kpreload
// provisioner installing the test driver into a target root directory (a
// temporary tree holding the real kernel's modules, so nothing on the host
// changes): staging with the real dkms, upload over SSH/SFTP, tar, ldconfig,
// systemctl --root and the kernel install hook run through the communicator.
func TestProvisionerOverSSH(t *testing.T) {
	if testing.Short() {
		t.Skip("real packer run with a dkms build; -short")
	}
	modules := filepath.Join(testenv.CacheRoot(), "kernels", testKernel, "lib", "modules", testKernel)
	if _, err := os.Stat(filepath.Join(modules, "modules.dep")); err != nil {
		t.Fatalf("kernel %s is not unpacked (%v): run scripts/kernels.sh %s", testKernel, err, testKernel)
	}
	port, key := startSSHD(t)
	target := t.TempDir()
	if err := os.MkdirAll(filepath.Join(target, "lib", "modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("cp", "-a", modules, filepath.Join(target, "lib", "modules", testKernel)).CombinedOutput(); err != nil {
		t.Fatalf("copy the kernel's modules into the target root: %v\n%s", err, b)
	}
	// The target boots systemd-boot (its ESP at /boot/efi has loader/), so
	// kpreload install can make it boot kpreload.
	if err := os.MkdirAll(filepath.Join(target, "boot/efi/loader"), 0o755); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("cp", filepath.Join(modules, "../../../boot/vmlinuz-"+testKernel), filepath.Join(target, "boot")).CombinedOutput(); err != nil {
		t.Fatalf("copy the kernel image into the target root: %v\n%s", err, b)
	}
	staging := filepath.Join(t.TempDir(), "staging")
	tmpl := filepath.Join(t.TempDir(), "provision.pkr.hcl")
	if err := os.WriteFile(tmpl, []byte(fmt.Sprintf(`
source "null" "target" {
  communicator         = "ssh"
  ssh_host             = "127.0.0.1"
  ssh_port             = %d
  ssh_username         = "root"
  ssh_private_key_file = %q
  ssh_timeout          = "30s"
}

build {
  sources = ["source.null.target"]

  provisioner "kpreload" {
    kernels                  = [%q]
    recipes                  = ["testdriver"]
    recipes_dir              = %q
    cache_dir                = %q
    instance_file            = %q
    kernel_cmdline           = "root=UUID=0b0e0f0a-1111-4222-8333-444444444444 rw console=ttyS0"
    target_root              = %q
    remote_staging_directory = %q
  }
}
`, port, key, testKernel, filepath.Join(repoRoot(t), "recipes"), moduleCache(t),
		filepath.Join(repoRoot(t), "images", "instance-example.yaml"), target, staging)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 20*time.Minute))
	defer cancel()
	out, err := packerRun(ctx, t, "build", tmpl)
	if err != nil {
		t.Fatalf("packer build: %v\n%s", err, lastLines(out, 40))
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "drivers:") || strings.Contains(l, "kpreload:") || strings.Contains(l, "installed on the target") {
			t.Log(strings.TrimSpace(l))
		}
	}
	for _, want := range []string{"Staging kpreload for kernels", "upload kpreload.tar.gz", "kpreload: built", "systemd-boot boots kernel " + testKernel + " with kpreload by default", "kpreload installed on the target"} {
		if !strings.Contains(out, want) {
			t.Errorf("packer output lacks %q:\n%s", want, lastLines(out, 40))
		}
	}
	for _, f := range []string{image.ImageKpreload, image.ImageInstance, image.ImagePostinstHook, "etc/ld.so.cache",
		image.ImageInitramfsDir + "/initrd.img-" + testKernel, "boot/efi/loader/entries/kpreload-" + testKernel + ".conf"} {
		if _, err := os.Stat(filepath.Join(target, f)); err != nil {
			t.Errorf("target root lacks /%s: %v", f, err)
		}
	}
	ix, err := bootindex.Read(filepath.Join(target, image.ImageCacheDir, "index", testKernel+".json"))
	if err != nil {
		t.Fatalf("target's boot index: %v", err)
	}
	if len(ix.Sets) != 1 || ix.Sets[0].Driver != "kpreload-edu" {
		t.Errorf("target boot index sets = %+v, want the kpreload-edu set", ix.Sets)
	}
}
