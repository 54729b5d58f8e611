package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// tempDirLock is the file inside a TempDir its owner holds flock(2)ed for as
// long as the directory is in use; the kernel releases it however the owner
// exits, so a directory whose lock can be taken was left by a dead process.
const tempDirLock = ".lock"

// TempDir creates a private directory inside the cache, named like the
// writers' temporary files (".tmp-<what>-*" in the cache directory), for
// files downloaded to be added with Add later (on the same file system, never
// in /tmp), and returns it with the function that removes it: call that on
// every path. While it is in use a lock inside it keeps the cleanup of other
// writers away; one left behind by a killed process is removed by the next
// TempDir, Add, Remove or Repair.
func (s *Store) TempDir(ctx context.Context, what string) (dir string, remove func() error, err error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("temporary directory: %w", err)
	}
	defer unlock()
	// Created under the writer lock, so removeTemps (which runs under it)
	// never sees a directory whose lock is not taken yet.
	if _, err := s.removeTemps(); err != nil {
		return "", nil, err
	}
	dir, err = os.MkdirTemp(s.dir, tmpPrefix+what+"-*")
	if err != nil {
		return "", nil, fmt.Errorf("temporary directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, tempDirLock), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		if err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("temporary directory %s: lock: %w", dir, err)
	}
	var once sync.Once
	var rerr error
	return dir, func() error {
		once.Do(func() {
			rerr = os.RemoveAll(dir) // still locked: nobody else removes it meanwhile
			f.Close()
		})
		return rerr
	}, nil
}

// removeStaleTempDir removes a TempDir whose owner is gone and reports
// whether it did; one still in use (its lock held) is left alone. Call it
// with the writer lock held.
func removeStaleTempDir(dir string) (bool, error) {
	f, err := os.OpenFile(filepath.Join(dir, tempDirLock), os.O_RDWR, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Killed between creating it and its lock (both under the writer lock).
	case err != nil:
		return false, fmt.Errorf("clean temporary directory %s: %w", dir, err)
	default:
		defer f.Close()
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
			return false, nil
		} else if err != nil {
			return false, fmt.Errorf("clean temporary directory %s: %w", dir, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return false, fmt.Errorf("clean temporary directory: %w", err)
	}
	return true, nil
}
