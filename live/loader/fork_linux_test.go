package loader

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
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
	got := forkedFinit(-1, "", 0, 0, 10*time.Second)
	if !errors.Is(got, errno) {
		t.Fatalf("forkedFinit(-1) = %v, want %v (%d)", got, errno, errno)
	}
}

// TestForkedInitErrno checks the same of init_module: an image shorter than
// an ELF header loads nothing and fails (ENOEXEC; EPERM where this process
// may not load modules) as it does called here, and an empty one is refused
// without a call.
func TestForkedInitErrno(t *testing.T) {
	image := []byte("x")
	want := unix.InitModule(image, "")
	var errno unix.Errno
	if !errors.As(want, &errno) {
		t.Fatalf("init_module(1 byte) here = %v, want an errno", want)
	}
	if got := forkedInit(image, "", 0, 10*time.Second); !errors.Is(got, errno) {
		t.Fatalf("forkedInit(1 byte) = %v, want %v (%d)", got, errno, errno)
	}
	if got := forkedInit(nil, "", 0, 10*time.Second); !errors.Is(got, unix.ENOEXEC) {
		t.Fatalf("forkedInit(nil) = %v, want ENOEXEC", got)
	}
}

// TestForkCallDeadline checks that a child still in its system call at the
// deadline is reported as still loading without waiting for it, and that
// it finishes on its own.
func TestForkCallDeadline(t *testing.T) {
	ts := unix.Timespec{Sec: 1}
	start := time.Now()
	pid, err := forkCall(0, unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
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

// TestForkCallNice checks that the child runs its system call at the nice
// value asked for: a higher one always, a lower one where this process may
// raise priorities (root, CAP_SYS_NICE) and its own one where it may not.
func TestForkCallNice(t *testing.T) {
	own, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		t.Fatalf("getpriority: %v", err)
	}
	own = 20 - own // the raw system call returns 20 - nice
	lowerWant := -5
	if os.Geteuid() != 0 {
		lowerWant = own
	}
	for _, tc := range []struct{ nice, want int }{
		{0, own},
		{7, 7},
		{-5, lowerWant},
	} {
		ts := unix.Timespec{Nsec: 300 * int64(time.Millisecond)}
		pid, err := forkCall(tc.nice, unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
		if err != nil {
			t.Fatalf("forkCall(nice %d): %v", tc.nice, err)
		}
		var got int
		var readErr error
		for i := 0; i < 50; i++ { // the child sets its nice value right after the fork
			if got, readErr = procNice(pid); readErr == nil && got == tc.want {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		if err := waitCall(pid, 10*time.Second); err != nil {
			t.Fatalf("child of forkCall(nice %d): %v", tc.nice, err)
		}
		if readErr != nil {
			t.Fatalf("nice of child %d: %v", pid, readErr)
		}
		if got != tc.want {
			t.Errorf("forkCall(nice %d): child ran at nice %d, want %d", tc.nice, got, tc.want)
		}
	}
}

// procNice reads a process's nice value, field 19 of /proc/PID/stat.
func procNice(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 17 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	return strconv.Atoi(f[16])
}
