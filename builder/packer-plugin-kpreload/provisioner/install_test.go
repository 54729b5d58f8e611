package provisioner

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/kpreload/kpreload/builder/image"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// localComm is a communicator whose target is this machine: commands run
// under sh, uploads are written to the local path. With target_root and
// remote_staging_directory in temporary directories, the real install script
// runs against a real directory tree without touching the host.
type localComm struct{}

func (localComm) Start(ctx context.Context, rc *packersdk.RemoteCmd) error {
	cmd := exec.CommandContext(ctx, "sh", "-c", rc.Command)
	cmd.Stdout, cmd.Stderr = rc.Stdout, rc.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() {
		err := cmd.Wait()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			code = 255
		}
		rc.SetExited(code)
	}()
	return nil
}

func (localComm) Upload(path string, r io.Reader, _ *os.FileInfo) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (localComm) UploadDir(string, string, []string) error {
	return errors.New("localComm: UploadDir not supported")
}
func (localComm) Download(string, io.Writer) error {
	return errors.New("localComm: Download not supported")
}
func (localComm) DownloadDir(string, string, []string) error {
	return errors.New("localComm: DownloadDir not supported")
}

// staticBinaries returns the static kpreload CLI and /init the target runs,
// built once per test run (sharedbins_test.go).
func staticBinaries(t *testing.T) (kpreload, initBin string) {
	t.Helper()
	return staticBinary(t, "kpreload", "./cmd/kpreload"), staticBinary(t, "kpreload-init", "./cmd/kpreload-init")
}

// TestProvisionInstallsIntoRoot runs the provisioner for real (stage.Stage with
// the test driver built by the real dkms, the archive, the install script
// with tar, ldconfig and the kernel install hook) against a target root that
// holds the real 6.1 cloud kernel's modules, through localComm.
func TestProvisionInstallsIntoRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("real dkms build and initramfs; -short")
	}
	kpreload, initBin := staticBinaries(t)
	target := kernelTarget(t)
	staging := filepath.Join(t.TempDir(), "staging")
	cache := moduleCache(t)

	p := &Provisioner{}
	if err := p.Prepare(map[string]interface{}{
		"kernels":                  []string{testKernel},
		"recipes":                  []string{"testdriver"},
		"recipes_dir":              recipesDir,
		"cache_dir":                cache,
		"kpreload_binary":          kpreload,
		"init_binary":              initBin,
		"instance_file":            "../../../images/instance-example.yaml",
		"kernel_cmdline":           "root=UUID=0b0e0f0a-1111-4222-8333-444444444444 rw console=ttyS0",
		"target_root":              target,
		"remote_staging_directory": staging,
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := p.Provision(ctx, packersdk.TestUi(t), localComm{}, nil); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	for _, f := range []string{
		image.ImageKpreload, image.ImageInit, image.ImageInstance, image.ImagePostinstHook,
		"etc/ld.so.conf.d/kpreload.conf", "etc/ld.so.cache",
		image.ImageInitramfsDir + "/initrd.img-" + testKernel,
		"boot/efi/loader/entries/kpreload-" + testKernel + ".conf", "boot/efi/kpreload/" + testKernel + "/initrd.img",
	} {
		if _, err := os.Stat(filepath.Join(target, f)); err != nil {
			t.Errorf("target lacks /%s: %v", f, err)
		}
	}
	ix, err := bootindex.Read(filepath.Join(target, image.ImageCacheDir, "index", testKernel+".json"))
	if err != nil {
		t.Fatalf("target's boot index: %v", err)
	}
	if len(ix.Sets) != 1 || ix.Sets[0].Driver != "kpreload-edu" {
		t.Errorf("target boot index sets = %+v, want the kpreload-edu set", ix.Sets)
	}
	if _, err := os.Stat(staging); !os.IsNotExist(err) {
		t.Errorf("remote staging directory left behind (stat: %v)", err)
	}

	// A kernel the target does not have fails with what to do.
	p2 := &Provisioner{}
	if err := p2.Prepare(map[string]interface{}{
		"kernels": []string{"6.12.117+deb12-cloud-amd64"}, "recipes_dir": recipesDir,
		"cache_dir": filepath.Join(t.TempDir(), "cache"), "kpreload_binary": kpreload, "init_binary": initBin,
		"target_root": target, "remote_staging_directory": staging,
	}); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	ui := &packersdk.BasicUi{Writer: &out, ErrorWriter: &out}
	err = p2.Provision(ctx, ui, localComm{}, nil)
	if err == nil || !strings.Contains(out.String(), "install linux-image-6.12.117+deb12-cloud-amd64 first") {
		t.Errorf("Provision for an absent kernel = %v, output:\n%s\nwant a failure saying the kernel is not installed", err, out.String())
	}

	// A target kpreload cannot make boot (no GRUB, no systemd-boot) fails the
	// build, saying what was looked for.
	bare := t.TempDir()
	if err := exec.Command("cp", "-a", filepath.Join(target, "lib"), bare).Run(); err != nil {
		t.Fatal(err)
	}
	p3 := &Provisioner{}
	if err := p3.Prepare(map[string]interface{}{
		"kernels": []string{testKernel}, "recipes": []string{"testdriver"}, "recipes_dir": recipesDir,
		"cache_dir": cache, "kpreload_binary": kpreload, "init_binary": initBin,
		"target_root": bare, "remote_staging_directory": staging,
	}); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	err = p3.Provision(ctx, ui, localComm{}, nil)
	if err == nil || !strings.Contains(out.String(), "no boot loader found in "+bare) || !strings.Contains(out.String(), "usr/sbin/grub-mkconfig") {
		t.Errorf("Provision into a root without a boot loader = %v, output:\n%s\nwant a failure naming what was looked for", err, out.String())
	}
}

// kernelTarget makes a target root that holds the real test kernel: its
// modules, its image in /boot, and an ESP at /boot/efi with loader/, as a
// root that boots systemd-boot has.
func kernelTarget(t *testing.T) string {
	t.Helper()
	kernelModules := filepath.Join(testenv.KernelTree(t, testKernel), "lib", "modules", testKernel)
	if _, err := os.Stat(filepath.Join(kernelModules, "modules.dep")); err != nil {
		t.Fatalf("kernel %s is not unpacked (%v): run scripts/kernels.sh %s", testKernel, err, testKernel)
	}
	target := t.TempDir()
	if err := os.MkdirAll(filepath.Join(target, "lib", "modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("cp", "-a", kernelModules, filepath.Join(target, "lib", "modules", testKernel)).Run(); err != nil {
		t.Fatalf("copy the kernel's modules into the target: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(target, "boot/efi/loader"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("cp", filepath.Join(kernelModules, "../../../boot/vmlinuz-"+testKernel), filepath.Join(target, "boot")).Run(); err != nil {
		t.Fatalf("copy the kernel image into the target: %v", err)
	}
	return target
}
