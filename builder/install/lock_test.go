package install

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// grubRootOneKernel is a GRUB root with one kernel that has its image, its
// kpreload initramfs and its driver cells: the refresh hook and the postrm
// hook of another kernel on it only rewrite GRUB's configuration.
func grubRootOneKernel(t *testing.T) string {
	t.Helper()
	return fakeRoot(t, map[string]string{
		"boot/grub/":                                 "",
		KernelImagePath(testKernel):                  "k",
		InitramfsPath(testKernel):                    "i",
		"lib/modules/" + testKernel + "/modules.dep": "",
		CacheDir + "/index/" + testKernel + ".json":  index(testKernel, true),
	})
}

// fakeUpdateGrub writes a grub.cfg whose first and default entry is
// kpreload's for testKernel, as update-grub would.
func fakeUpdateGrub(_ context.Context, root string, _ io.Writer) error {
	return os.WriteFile(filepath.Join(root, GrubConfig), []byte("set default=0\nmenuentry 'kpreload' --id '"+GrubEntryID(testKernel)+"' {\n}\n"), 0o644)
}

// TestHooksSerialize: a refresh and two postrm hooks run at once on one
// root; each rewrites the boot loader's configuration (a fake update-grub
// that records when it enters and leaves, and dawdles in between). With the
// hook lock they run one after the other: every enter is followed by its own
// exit.
func TestHooksSerialize(t *testing.T) {
	root := grubRootOneKernel(t)
	var mu sync.Mutex
	var events []string
	record := func(e string) { mu.Lock(); events = append(events, e); mu.Unlock() }
	options := func(name string) Options {
		return Options{Root: root, RootFS: testRootFS(), Bootloader: GRUB, LockTimeout: time.Minute,
			UpdateGrub: func(ctx context.Context, root string, log io.Writer) error {
				record("enter " + name)
				time.Sleep(300 * time.Millisecond)
				record("exit " + name)
				return fakeUpdateGrub(ctx, root, log)
			}}
	}
	ctx := context.Background()
	runs := map[string]func(Options) error{
		"refresh":  func(o Options) error { _, err := Refresh(ctx, o); return err },
		"postrm a": func(o Options) error { _, err := KernelRemoved(ctx, o, "6.1.0-1-cloud-amd64"); return err },
		"postrm b": func(o Options) error { _, err := KernelRemoved(ctx, o, "6.1.0-2-cloud-amd64"); return err },
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(runs))
	for name, run := range runs {
		wg.Go(func() {
			if err := run(options(name)); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got, want := len(events), 2*len(runs); got != want {
		t.Fatalf("events %q: got %d, want %d", events, got, want)
	}
	for i := 0; i < len(events); i += 2 {
		name, ok := strings.CutPrefix(events[i], "enter ")
		if got, want := events[i+1], "exit "+name; !ok || got != want {
			t.Fatalf("events %q: at %d got %q, want %q: two hooks rewrote the boot loader at once", events, i+1, got, want)
		}
	}
}

// TestHookLockTimeout: while another process holds the root's hook lock,
// refresh and install wait their LockTimeout, then fail naming the lock
// file and its holder, and change nothing (update-grub never runs). The
// postinst and postrm hooks wait past it, saying for whom, and run once the
// lock is free.
func TestHookLockTimeout(t *testing.T) {
	root := grubRootOneKernel(t)
	file := filepath.Join(root, HookLock)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	const holder = "kpreload kernel-hook refresh (pid 4242) since 2026-11-27T05:00:00Z"
	if _, err := f.WriteString(holder + "\n"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		name string
		run  func(Options) error
	}{
		{"refresh", func(o Options) error { _, err := Refresh(ctx, o); return err }},
		{"install", func(o Options) error { _, err := Install(ctx, o); return err }},
	} {
		t.Run(c.name, func(t *testing.T) {
			grubRuns := 0
			o := Options{Root: root, RootFS: testRootFS(), Bootloader: GRUB, Kernels: []string{testKernel}, SkipInitramfs: true, LockTimeout: 300 * time.Millisecond,
				UpdateGrub: func(context.Context, string, io.Writer) error { grubRuns++; return nil }}
			start := time.Now()
			err := c.run(o)
			took := time.Since(start)
			want := fmt.Sprintf("another kpreload kernel hook or install holds the lock: %s holds %s, waited 300ms", holder, file)
			if err == nil || !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), want) {
				t.Errorf("got error %v, want one saying %q", err, want)
			}
			if took < 300*time.Millisecond {
				t.Errorf("gave up after %s, want the 300ms timeout", took)
			}
			if grubRuns != 0 {
				t.Errorf("update-grub ran %d times while another held the lock, want 0", grubRuns)
			}
		})
	}
	for _, c := range []struct {
		name string
		run  func(Options) error
	}{
		{"postrm", func(o Options) error { _, err := KernelRemoved(ctx, o, "6.1.0-1-cloud-amd64"); return err }},
		{"postinst", func(o Options) error { _, err := KernelAdded(ctx, o, "6.1.0-1-cloud-amd64"); return err }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var log strings.Builder
			var logMu sync.Mutex
			o := Options{Root: root, RootFS: testRootFS(), Bootloader: GRUB, SkipInitramfs: true, LockTimeout: 300 * time.Millisecond,
				Log:        writerFunc(func(p []byte) (int, error) { logMu.Lock(); defer logMu.Unlock(); return log.Write(p) }),
				UpdateGrub: fakeUpdateGrub}
			done := make(chan error, 1)
			go func() { done <- c.run(o) }()
			select {
			case err := <-done:
				t.Fatalf("%s returned %v while another held the lock, want it to wait past LockTimeout", c.name, err)
			case <-time.After(time.Second):
			}
			logMu.Lock()
			got := log.String()
			logMu.Unlock()
			if want := "waiting for " + file + " (held by " + holder + "), without a time limit"; !strings.Contains(got, want) {
				t.Errorf("log %q, want it to say %q", got, want)
			}
			if err := unix.Flock(int(f.Fd()), unix.LOCK_UN); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteAt([]byte(holder+"\n"), 0); err != nil {
					t.Fatal(err)
				}
			}()
			select {
			case err := <-done:
				if err != nil && errors.Is(err, ErrLocked) {
					t.Errorf("%s after the lock was freed: %v", c.name, err)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("%s still waits 30s after the lock was freed", c.name)
			}
		})
	}
}

// writerFunc is an io.Writer made of a function.
type writerFunc func([]byte) (int, error)

func (w writerFunc) Write(p []byte) (int, error) { return w(p) }
