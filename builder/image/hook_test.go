package image

import (
	"io"

	"bytes"
	"github.com/cavaliergopher/cpio"
	"github.com/klauspost/compress/zstd"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/internal/testenv"
)

// runHook runs a hook script with sh on a directory tree (KPRELOAD_ROOT).
func runHook(t *testing.T, script, root, kpreload string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hook")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", append([]string{path}, args...)...)
	cmd.Env = append(os.Environ(), "KPRELOAD_ROOT="+root, "KPRELOAD_BIN="+kpreload)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// TestHooks runs the kernel postinst and postrm hooks on a tree laid out like an
// image, with the real static kpreload and the real 6.1 kernel's modules.
func TestHooks(t *testing.T) {
	kpreload, initBin := binaries(t)
	ktree := testenv.KernelTree(t, testKernel)
	root := t.TempDir()
	mkdir := func(p string) {
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		mkdir(filepath.Dir(p))
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mkdir("lib/modules")
	if err := os.Symlink(filepath.Join(ktree, "lib/modules", testKernel), filepath.Join(root, "lib/modules", testKernel)); err != nil {
		t.Fatal(err)
	}
	mkdir("boot")
	vmlinuz, err := os.ReadFile(filepath.Join(ktree, "boot", "vmlinuz-"+testKernel))
	if err != nil {
		t.Fatal(err)
	}
	write("boot/vmlinuz-"+testKernel, string(vmlinuz))
	if err := copyFile(initBin, filepath.Join(root, ImageInit), 0o755); err != nil {
		t.Fatal(err)
	}
	cmdline := ImageCmdlineFor("0b0e0f0a-1111-4222-8333-444444444444", "console=ttyS0")
	write(ImageCmdline, cmdline+"\n")
	write("boot/efi/loader/loader.conf", "default kpreload-6.1.0-55-cloud-amd64.conf\ntimeout 0\n")
	write("boot/efi/loader/entries/kpreload-6.1.0-55-cloud-amd64.conf", "title old\n")
	mkdir(ImageCacheDir + "/index")

	// No cell in the cache for the kernel: a clear warning, and the kernel still gets
	// its initramfs and boot entry.
	out, errOut, err := runHook(t, PostinstHook, root, kpreload, testKernel, "/boot/vmlinuz-"+testKernel)
	if err != nil {
		t.Fatalf("postinst hook: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	if !strings.Contains(errOut, "WARNING: the module cache has no driver cell for kernel "+testKernel) || !strings.Contains(errOut, "kernels the cache holds: none") {
		t.Errorf("postinst stderr = %q, want a warning that the cache has no cell for %s", errOut, testKernel)
	}
	esp := filepath.Join(root, ImageESPMount)
	entry, err := os.ReadFile(filepath.Join(esp, EntryPath(testKernel)))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(entry), LoaderEntry(testKernel, cmdline); got != want {
		t.Errorf("hook's loader entry =\n%s\nwant (LoaderEntry)\n%s", got, want)
	}
	initrd, err := os.ReadFile(filepath.Join(root, ImageInitramfsDir, "initrd.img-"+testKernel))
	if err != nil {
		t.Fatal(err)
	}
	onESP, err := os.ReadFile(filepath.Join(esp, ESPInitrdPath(testKernel)))
	if err != nil || !bytes.Equal(onESP, initrd) || len(initrd) < 1<<20 {
		t.Errorf("initramfs on the ESP: %d bytes (err %v), in /boot/kpreload %d bytes: want the same, over 1 MiB", len(onESP), err, len(initrd))
	}
	kernelOnESP, err := os.ReadFile(filepath.Join(esp, ESPKernelPath(testKernel)))
	if err != nil || !bytes.Equal(kernelOnESP, vmlinuz) {
		t.Errorf("kernel on the ESP differs from /boot/vmlinuz-%s (err %v)", testKernel, err)
	}
	conf, _ := os.ReadFile(filepath.Join(esp, espLoaderConf))
	if got, want := string(conf), "default "+EntryName(testKernel)+"\ntimeout 0\n"; got != want {
		t.Errorf("loader.conf = %q, want %q", got, want)
	}
	// The boot index /init reads is in the initramfs, and the same inputs give the
	// same bytes as Stage's initramfs would (kpreload initramfs is deterministic).
	if _, err := os.Stat(filepath.Join(esp, "loader/entries/kpreload-6.1.0-56-cloud-amd64.conf.new")); err == nil {
		t.Error("a temporary entry file was left behind")
	}

	// With a cell cached, no warning.
	write(ImageCacheDir+"/index/"+testKernel+".json", `{"format":1,"kernel":"`+testKernel+`","sets":[]}`)
	_, errOut, err = runHook(t, PostinstHook, root, kpreload, testKernel)
	if err != nil || strings.Contains(errOut, "WARNING") {
		t.Errorf("postinst with a cached cell: err %v, stderr %q; want no warning", err, errOut)
	}

	// An image built with --early-drivers: the hook puts the cache's sets in, marks
	// the index complete and copies the instance file, as Stage does.
	write(ImageEarlyDrivers, "# marker\n")
	write(ImageInstance, "resources:\n  driver:\n    version: latest\n")
	if _, errOut, err = runHook(t, PostinstHook, root, kpreload, testKernel); err != nil {
		t.Fatalf("postinst with early drivers: %v\n%s", err, errOut)
	}
	files := initramfsFiles(t, filepath.Join(root, ImageInitramfsDir, "initrd.img-"+testKernel))
	ix := files["lib/modules/"+testKernel+"/kpreload.index.json"]
	if !strings.Contains(ix, `"complete":true`) || files["etc/kpreload/instance.yaml"] != "resources:\n  driver:\n    version: latest\n" {
		t.Errorf("early-drivers initramfs: index %.200s, instance %q; want a complete index and the instance copied", ix, files["etc/kpreload/instance.yaml"])
	}
	os.Remove(filepath.Join(root, ImageEarlyDrivers))
	os.Remove(filepath.Join(root, ImageInstance))

	// A failing initramfs build fails the hook (dpkg then reports the kernel unconfigured).
	_, errOut, err = runHook(t, PostinstHook, root, kpreload, "9.9.9-nope-amd64")
	if err == nil || !strings.Contains(errOut, "9.9.9-nope-amd64") {
		t.Errorf("postinst for a kernel without modules: err %v, stderr %q; want a failure naming it", err, errOut)
	}

	// Removing the kernel removes its files and points the default elsewhere.
	out, errOut, err = runHook(t, PostrmHook, root, kpreload, testKernel)
	if err != nil {
		t.Fatalf("postrm hook: %v\n%s%s", err, out, errOut)
	}
	for _, p := range []string{filepath.Join(esp, EntryPath(testKernel)), filepath.Join(esp, "kpreload", testKernel), filepath.Join(root, ImageInitramfsDir, "initrd.img-"+testKernel)} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is still there after postrm", p)
		}
	}
	conf, _ = os.ReadFile(filepath.Join(esp, espLoaderConf))
	if got, want := string(conf), "default kpreload-6.1.0-55-cloud-amd64.conf\ntimeout 0\n"; got != want {
		t.Errorf("loader.conf after postrm = %q, want %q", got, want)
	}
}

// TestHookScriptsParse checks both hooks with sh -n (and shellcheck when installed).
func TestHookScriptsParse(t *testing.T) {
	for name, script := range map[string]string{"postinst": PostinstHook, "postrm": PostrmHook} {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("sh", "-n", p).CombinedOutput(); err != nil {
			t.Errorf("%s: sh -n: %v\n%s", name, err, out)
		}
		if sc, err := exec.LookPath("shellcheck"); err == nil {
			if out, err := exec.Command(sc, "-s", "sh", "-e", "SC2012", p).CombinedOutput(); err != nil {
				t.Errorf("%s: shellcheck: %v\n%s", name, err, out)
			}
		}
	}
}

// initramfsFiles reads a zstd-compressed newc initramfs into name -> content.
func initramfsFiles(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := zstd.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	r := cpio.NewReader(zr)
	out := map[string]string{}
	for {
		h, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		if h.Mode.IsRegular() {
			b, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			out[h.Name] = string(b)
		}
	}
	return out
}
