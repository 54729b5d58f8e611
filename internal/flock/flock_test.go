package flock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestLock: a free lock is taken at once; a held one calls busy once, ends
// with busy's error, or waits until ctx ends, or until it is freed.
func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	open := func() *os.File {
		t.Helper()
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	holder := open()
	if err := Lock(context.Background(), holder, time.Millisecond, nil); err != nil {
		t.Fatalf("free lock: %v", err)
	}
	errBusy := errors.New("busy")
	calls := 0
	if got, want := Lock(context.Background(), open(), time.Millisecond, func() error { calls++; return errBusy }), errBusy; !errors.Is(got, want) || calls != 1 {
		t.Errorf("held lock with a refusing busy: got %v after %d calls, want %v after 1", got, calls, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	calls = 0
	if got, want := Lock(ctx, open(), time.Millisecond, func() error { calls++; return nil }), context.DeadlineExceeded; !errors.Is(got, want) || calls != 1 {
		t.Errorf("held lock until ctx ends: got %v after %d busy calls, want %v after 1", got, calls, want)
	}
	go func() { time.Sleep(50 * time.Millisecond); unix.Flock(int(holder.Fd()), unix.LOCK_UN) }()
	if err := Lock(context.Background(), open(), time.Millisecond, nil); err != nil {
		t.Errorf("lock freed meanwhile: %v", err)
	}
}
