package main

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestCloexecInherited opens a descriptor the way an inherited one looks (no
// FD_CLOEXEC) and checks that cloexecInherited marks it, and leaves stdio alone.
func TestCloexecInherited(t *testing.T) {
	fd, err := unix.Open("/dev/null", unix.O_RDONLY, 0) // no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC != 0 {
		t.Fatalf("fd %d flags %#x (%v): want it without FD_CLOEXEC to start with", fd, flags, err)
	}
	cloexecInherited()
	if flags, err = unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("fd %d flags %#x (%v) after cloexecInherited: want FD_CLOEXEC", fd, flags, err)
	}
	if flags, err = unix.FcntlInt(2, unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC != 0 {
		t.Errorf("stderr flags %#x (%v): want stdio left inheritable", flags, err)
	}
}
