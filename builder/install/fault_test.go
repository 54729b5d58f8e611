package install

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// hookRoot lays out a systemd-boot root whose default is an older kernel
// with a complete entry, plus the real 6.1 kernel to add, and returns it.
func hookRoot(t *testing.T) string {
	t.Helper()
	ktree := testenv.KernelTree(t, testKernel)
	vmlinuz, err := os.ReadFile(filepath.Join(ktree, "boot", "vmlinuz-"+testKernel))
	if err != nil {
		t.Fatal(err)
	}
	init, err := os.ReadFile(testInit(t))
	if err != nil {
		t.Fatal(err)
	}
	older := "6.1.0-55-cloud-amd64"
	root := fakeRoot(t, map[string]string{
		"boot/vmlinuz-" + testKernel: string(vmlinuz), Init: string(init), Cmdline: "root=UUID=x rw\n",
		"boot/vmlinuz-" + older: "old kernel", InitramfsPath(older): "old initramfs",
		CacheDir + "/index/" + older + ".json": index(older, true),
		"boot/efi/loader/loader.conf":          LoaderConf(older),
		"boot/efi/" + EntryPath(older):         LoaderEntry(older, "root=UUID=x rw"),
		"boot/efi/" + ESPKernelPath(older):     "old kernel",
		"boot/efi/" + ESPInitrdPath(older):     "old initramfs",
		"lib/modules/":                         "",
	})
	// A copy (hard links where it can), not a link: the hook resolves every
	// path inside the root, so a link out of it would lead nowhere.
	copyTree(t, filepath.Join(ktree, "lib/modules", testKernel), filepath.Join(root, "lib/modules", testKernel))
	// Make the new kernel's cells there too, so that it becomes the default
	// when the hook completes.
	if err := os.WriteFile(filepath.Join(root, CacheDir, "index", testKernel+".json"), []byte(index(testKernel, true)), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// copyTree copies the directory src to dst, hard-linking files where both
// are on one filesystem.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	if exec.Command("cp", "-al", src, dst).Run() == nil {
		return
	}
	os.RemoveAll(dst)
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -a %s %s: %v\n%s", src, dst, err, out)
	}
}

// checkBootable checks that the ESP's default entry is complete: loader.conf
// names an entry whose kernel and initramfs are there in full.
func checkBootable(t *testing.T, root, when string) (def string) {
	t.Helper()
	esp := filepath.Join(root, ESPMount)
	conf, err := os.ReadFile(filepath.Join(esp, ESPLoaderConf))
	if err != nil {
		t.Fatalf("%s: loader.conf: %v", when, err)
	}
	for _, l := range strings.Split(string(conf), "\n") {
		if v, ok := strings.CutPrefix(l, "default "); ok {
			def = strings.TrimSuffix(strings.TrimPrefix(v, "kpreload-"), ".conf")
		}
	}
	entry, err := os.ReadFile(filepath.Join(esp, EntryPath(def)))
	if err != nil || string(entry) != LoaderEntry(def, "root=UUID=x rw") {
		t.Fatalf("%s: the default entry %s is not complete: %q (%v)", when, def, entry, err)
	}
	for src, dst := range map[string]string{KernelImagePath(def): ESPKernelPath(def), InitramfsPath(def): ESPInitrdPath(def)} {
		a, _ := os.ReadFile(filepath.Join(root, src))
		b, err := os.ReadFile(filepath.Join(esp, dst))
		if err != nil || !bytes.Equal(a, b) {
			t.Fatalf("%s: %s on the ESP is not /%s (%d bytes, want %d; %v)", when, dst, src, len(b), len(a), err)
		}
	}
	return def
}

// TestHookKilledMidWrite kills the real kernel hook (kpreload kernel-hook
// postinst) with SIGKILL at many points of its run: whenever it dies, the
// ESP's default entry is complete and boots (the old kernel's or the new
// one's), and the next run completes.
func TestHookKilledMidWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("many runs of the real hook; -short")
	}
	bin := testKpreload(t)
	root := hookRoot(t)
	run := func() *exec.Cmd {
		cmd := exec.Command(bin, "kernel-hook", "postinst", "--root", root, testKernel)
		cmd.Stdout, cmd.Stderr = nil, nil
		return cmd
	}
	// How long a whole run takes, to spread the kills over it.
	start := time.Now()
	if out, err := run().CombinedOutput(); err != nil {
		t.Fatalf("hook: %v\n%s", err, out)
	}
	whole := time.Since(start)
	if got := checkBootable(t, root, "after a complete run"); got != testKernel {
		t.Fatalf("default after a complete run = %s, want %s", got, testKernel)
	}
	root = hookRoot(t)
	kills, completed := 0, 0
	for i := 1; i <= 24; i++ {
		cmd := run()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(whole * time.Duration(i) / 20)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		if ee, ok := err.(*exec.ExitError); ok && ee.Sys().(syscall.WaitStatus).Signaled() {
			kills++
		} else {
			completed++
		}
		checkBootable(t, root, "after a kill at "+(whole*time.Duration(i)/20).String())
		// Start over from the old state half of the time, so kills land in
		// every step of a first install too.
		if i%2 == 0 {
			root = hookRoot(t)
		}
	}
	t.Logf("a whole run takes %s; %d runs killed, %d completed first; the default entry was complete after every one", whole.Round(time.Millisecond), kills, completed)
	if kills < 10 {
		t.Errorf("only %d of 24 runs were killed mid-way: the test did not test", kills)
	}
	if out, err := run().CombinedOutput(); err != nil {
		t.Fatalf("the hook after the kills: %v\n%s", err, out)
	}
	if got := checkBootable(t, root, "after a run following the kills"); got != testKernel {
		t.Errorf("default after the kills and a complete run = %s, want %s", got, testKernel)
	}
	// And it cleared what the killed runs left half-written.
	var left []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".") && !d.IsDir() {
			left = append(left, p)
		}
		return nil
	})
	if len(left) > 0 {
		t.Errorf("temporary files left after a complete run: %v", left)
	}
}

// TestHookReadOnlyAndFullBoot runs the real hook on a root whose /boot is
// read-only, then full (a 1 MiB tmpfs), in a private mount namespace: it
// fails saying why, and the previous default entry still boots.
func TestHookReadOnlyAndFullBoot(t *testing.T) {
	if testing.Short() {
		t.Skip("the real hook in a mount namespace; -short")
	}
	if os.Getuid() != 0 {
		t.Fatal("mounting a read-only or full /boot needs root (make test runs as root)")
	}
	bin := testKpreload(t)
	for _, c := range []struct{ name, mount, want string }{
		{"read-only", `mount --bind "$R/boot" "$R/boot" && mount -o remount,bind,ro "$R/boot"`, "read-only file system"},
		{"full", `mount -t tmpfs -o size=1m tmpfs "$R/boot/kpreload"`, "no space left on device"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := hookRoot(t)
			cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
				c.mount+` && exec "$B" kernel-hook postinst --root "$R" `+testKernel)
			cmd.Env = append(os.Environ(), "R="+root, "B="+bin)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(strings.ToLower(string(out)), c.want) {
				t.Errorf("hook on a %s /boot: %v\n%s\nwant a failure saying %q", c.name, err, out, c.want)
			}
			if got := checkBootable(t, root, "after the failed hook"); got != "6.1.0-55-cloud-amd64" {
				t.Errorf("default after the failed hook = %s, want the previous one", got)
			}
		})
	}
}
