package install

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// treeHashes maps each file and link of the tree at root (relative path) to
// a hash of its content or target; skip names paths left out.
func treeHashes(t *testing.T, root string, skip ...string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		for _, s := range skip {
			if rel == s {
				return nil
			}
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			got[rel] = "-> " + target
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			got[rel] = hex.EncodeToString(sum[:])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// diffTrees lists the paths whose hash differs between before and after.
func diffTrees(before, after map[string]string) []string {
	var d []string
	for p, h := range before {
		if after[p] != h {
			d = append(d, p+" changed or removed")
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			d = append(d, p+" added")
		}
	}
	return d
}

// temporaries lists the files kpreload's atomic writers leave while they
// write (inroot.TempPrefix, the assembler's ".initrd.img-") under root.
func temporaries(root string) []string {
	var left []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasPrefix(d.Name(), inroot.TempPrefix) || strings.HasPrefix(d.Name(), ".initrd.img-")) {
			left = append(left, p)
		}
		return nil
	})
	return left
}

// TestHookSIGTERM runs the real kernel hooks (kpreload kernel-hook postinst,
// postrm, refresh) on a systemd-boot root and sends SIGTERM while they are
// mid-work: held at a step by the fault-injection knob KPRELOAD_HOOK_STALL
// (install.Options.StallAt), which waits for the signal, so that it lands
// there every time. The hook exits 143 (dpkg sees it did not finish) saying
// what it left undone, removes its temporary files, and leaves every file
// either as it was or whole and new: the ESP's default entry still boots.
// The same hook run again completes.
func TestHookSIGTERM(t *testing.T) {
	bin := testKpreload(t)
	const older = "6.1.0-55-cloud-amd64"
	lock := filepath.FromSlash(HookLock)
	for _, tc := range []struct {
		name    string
		args    []string
		stall   string
		tempMid bool     // a temporary file exists while it stalls
		changed []string // files that may be whole and new after the signal
		want    string   // in stderr
	}{
		{"postinst mid-initramfs", []string{"postinst", testKernel}, StallMidInitramfs, true, nil,
			"kpreload: kernel postinst hook for " + testKernel + ": interrupted by SIGTERM: the kpreload initramfs of " + testKernel + " was not replaced; run it again"},
		{"postinst before the boot loader", []string{"postinst", testKernel}, StallBeforeBootloader, false, []string{InitramfsPath(testKernel)},
			"kpreload: kernel postinst hook for " + testKernel + ": interrupted by SIGTERM: the boot loader was not updated; run it again"},
		{"postrm before the boot loader", []string{"postrm", older}, StallBeforeBootloader, false, []string{InitramfsPath(older)},
			"kpreload: kernel postrm hook for " + older + ": interrupted by SIGTERM: the boot loader was not updated; run it again"},
		{"refresh mid-initramfs", []string{"refresh"}, StallMidInitramfs, true, nil,
			"kpreload: kernel-hook refresh: kernel " + testKernel + ": interrupted by SIGTERM: the kpreload initramfs of " + testKernel + " was not replaced; run it again"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := hookRoot(t)
			before := treeHashes(t, root, lock)
			args := append([]string{"kernel-hook"}, tc.args...)
			args = append(args, "--root", root)
			cmd := exec.Command(bin, args...)
			cmd.Env = append(os.Environ(), "KPRELOAD_HOOK_STALL="+tc.stall)
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			var said bytes.Buffer
			r := bufio.NewReader(io.TeeReader(stderr, &said))
			stalled := `kpreload: stalling at step "` + tc.stall + `" until interrupted`
			for {
				line, err := r.ReadString('\n')
				if strings.HasPrefix(line, stalled) {
					break
				}
				if err != nil {
					cmd.Wait()
					t.Fatalf("the hook ended before it stalled: %v\n%s", err, said.String())
				}
			}
			if got := temporaries(root); (len(got) > 0) != tc.tempMid {
				t.Errorf("temporary files while stalled: %v; want some: %v", got, tc.tempMid)
			}
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, r)
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case err = <-exited:
			case <-time.After(testenv.Deadline(t, 30*time.Second)):
				t.Fatalf("the hook still runs after SIGTERM\n%s", said.String())
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 143 {
				t.Errorf("hook after SIGTERM: %v; want exit status 143\n%s", err, said.String())
			}
			if !strings.Contains(said.String(), tc.want+"\n") {
				t.Errorf("stderr:\n%s\nwant the line %q", said.String(), tc.want)
			}
			if strings.Contains(said.String(), "exiting without its cleanups") {
				t.Errorf("the hook did not return by itself within the grace time:\n%s", said.String())
			}
			if got := temporaries(root); len(got) > 0 {
				t.Errorf("temporary files left after SIGTERM: %v", got)
			}
			after := treeHashes(t, root, lock)
			for _, c := range tc.changed {
				delete(before, c)
				delete(after, c)
			}
			if d := diffTrees(before, after); len(d) > 0 {
				t.Errorf("after SIGTERM the root changed beyond %v: %v", tc.changed, d)
			}
			if tc.args[0] == "postinst" && tc.stall == StallBeforeBootloader {
				// The new initramfs is whole: a complete run makes the same.
				assertSameInitramfs(t, bin, root)
			}
			// postrm removed the old default's initramfs from /boot, not its
			// copy on the ESP, which the tree's hashes show unchanged.
			if tc.args[0] != "postrm" {
				if got := checkBootable(t, root, "after SIGTERM"); got != older {
					t.Errorf("default after SIGTERM = %s, want the previous one, %s", got, older)
				}
			}
			if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
				t.Fatalf("the hook run again after SIGTERM: %v\n%s", err, out)
			}
			if got := temporaries(root); len(got) > 0 {
				t.Errorf("temporary files left after the run again: %v", got)
			}
		})
	}
}

// assertSameInitramfs checks that the kpreload initramfs of testKernel in
// root has the size a complete postinst run on a fresh root gives it.
func assertSameInitramfs(t *testing.T, bin, root string) {
	t.Helper()
	fresh := hookRoot(t)
	if out, err := exec.Command(bin, "kernel-hook", "postinst", testKernel, "--root", fresh).CombinedOutput(); err != nil {
		t.Fatalf("a complete run: %v\n%s", err, out)
	}
	a, errA := os.Stat(filepath.Join(root, InitramfsPath(testKernel)))
	b, errB := os.Stat(filepath.Join(fresh, InitramfsPath(testKernel)))
	if errA != nil || errB != nil || a.Size() != b.Size() {
		t.Errorf("the initramfs left by the interrupted hook: %v, %v; a complete run's: %v, %v", a, errA, b, errB)
	}
}
