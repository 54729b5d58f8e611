package loader

import (
	"errors"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestForkedFinitErrno checks that the child's errno comes back as the
// error: finit_module on a closed descriptor loads nothing and fails (EBADF;
// EPERM where this process may not load modules, ENOSYS in a sandbox without
// modules) with the errno this process gets calling it itself.
func TestForkedFinitErrno(t *testing.T) {
	want := unix.FinitModule(-1, "", 0)
	var errno unix.Errno
	if !errors.As(want, &errno) {
		t.Fatalf("finit_module(-1) here = %v, want an errno", want)
	}
	got := forkedFinit(-1, "", 0, 10*time.Second)
	if !errors.Is(got, errno) {
		t.Fatalf("forkedFinit(-1) = %v, want %v (%d)", got, errno, errno)
	}
}

// TestForkCallDeadline checks that a child still in its system call at the
// deadline is reported as still loading without waiting for it, and that
// it finishes on its own.
func TestForkCallDeadline(t *testing.T) {
	ts := unix.Timespec{Sec: 1}
	start := time.Now()
	pid, err := forkCall(unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
	if err != nil {
		t.Fatalf("forkCall: %v", err)
	}
	if err := waitCall(pid, 100*time.Millisecond); !errors.Is(err, errStillLoading) {
		t.Fatalf("waitCall at 100 ms = %v, want %v", err, errStillLoading)
	}
	if got := time.Since(start); got > 900*time.Millisecond {
		t.Errorf("the deadline of 100 ms returned after %v", got)
	}
	if err := unix.Kill(pid, 0); err != nil {
		t.Fatalf("the child is gone at the deadline: %v", err)
	}
	// The waiting goroutine reaps the child when its sleep ends.
	for unix.Kill(pid, 0) == nil {
		if time.Since(start) > 10*time.Second {
			t.Fatal("the child's 1 s sleep never ended")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := time.Since(start); got < time.Second {
		t.Errorf("the child's 1 s sleep ended after %v", got)
	}
}
