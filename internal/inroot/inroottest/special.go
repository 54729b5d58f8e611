package inroottest

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Special is a kind of file a reader of bounded regular files must refuse at
// once: Make makes one at a path, and Want is in the reader's error.
type Special struct {
	Name string
	Make func(t testing.TB, path string)
	Want string
}

// Specials returns the files a reader of regular files of at most max bytes
// must refuse at once: a FIFO (FIFO), a character device (/dev/zero's
// numbers; the case skips where mknod is not allowed), a directory and a
// sparse regular file of max+1 bytes.
func Specials(max int64) []Special {
	return []Special{
		{"FIFO", func(t testing.TB, p string) { FIFO(t, p) }, "not a regular file: it is a named pipe"},
		{"device", func(t testing.TB, p string) {
			if err := unix.Mknod(p, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 5))); err != nil {
				t.Skipf("mknod %s: %v", p, err)
			}
		}, "not a regular file: it is a character device"},
		{"directory", func(t testing.TB, p string) {
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file: it is a directory"},
		{"too large", func(t testing.TB, p string) {
			f, err := os.Create(p)
			if err == nil {
				err = errors.Join(f.Truncate(max+1), f.Close())
			}
			if err != nil {
				t.Fatal(err)
			}
		}, "file too large"},
	}
}

// RefusesAtOnce checks that call returns within 5 s (a reader waiting on a
// FIFO or reading a device fails the test instead of hanging it) with an
// error holding want and the file's path; what names the call.
func RefusesAtOnce(t testing.TB, what, path, want string, call func() error) {
	t.Helper()
	start := time.Now()
	err := Within(5*time.Second, call)
	if errors.Is(err, ErrHung) || err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
		t.Errorf("%s: %v; want an error at once naming %s: %q", what, err, path, want)
		return
	}
	t.Logf("%s: refused in %v: %v", what, time.Since(start).Round(time.Millisecond), err)
}
