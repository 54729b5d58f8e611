package inroottest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// FIFO makes a named pipe at path. When the test ends it opens the pipe's
// other end once, so that a reader the code under test left blocked in
// open(2) on it returns (and the test binary can exit).
func FIFO(t testing.TB, path string) {
	t.Helper()
	if err := unix.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Release(path) })
}

// Release opens the other end of the named pipe at path once, if it is
// there, so that a reader blocked in open(2) on it returns.
func Release(path string) {
	if fd, err := unix.Open(path, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
		time.Sleep(10 * time.Millisecond)
		unix.Close(fd)
	}
}

// ErrHung is what Within returns for a call that did not return in time.
var ErrHung = errors.New("did not return in time")

// Within runs f and returns its error, or ErrHung when f has not returned
// after d (f is left running: it is the hang under test).
func Within(d time.Duration, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		return ErrHung
	}
}

// RefusesFIFO checks that call, given the FIFO at fifo, returns within 5 s
// with an error holding want (the FIFO's path, or its path and the refusal)
// and "not a regular file"; what names the call in the failure message.
func RefusesFIFO(t testing.TB, what, fifo, want string, call func() error) {
	t.Helper()
	err := Within(5*time.Second, call)
	if errors.Is(err, ErrHung) || err == nil || !strings.Contains(err.Error(), "not a regular file") || !strings.Contains(err.Error(), want) {
		t.Errorf("%s of a FIFO: %v; want a not-a-regular-file error naming %s", what, err, fifo)
	}
}
