package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sync"

	"github.com/kpreload/kpreload/internal/inroot"
	"golang.org/x/sys/unix"
)

// tempDirLock is the file inside a TempDir its owner holds flock(2)ed for as
// long as the directory is in use; the kernel releases it however the owner
// exits, so a directory whose lock can be taken was left by a dead process.
const tempDirLock = ".lock"

// Scratch is a private directory inside the cache (TempDir), for files
// downloaded to be added with Add later.
type Scratch struct {
	s    *Store
	name string // in the store's root
	lock *os.File
	once sync.Once
	err  error
}

// TempDir creates a private directory inside the cache, named like the
// writers' temporary files (".tmp-<what>-*" in the cache directory), for
// files downloaded to be added with Add later (on the same file system, never
// in /tmp), and returns it: call its Remove on every path. While it is in
// use a lock inside it keeps the cleanup of other writers away; one left
// behind by a killed process is removed by the next TempDir, Add, Remove or
// Repair.
func (s *Store) TempDir(ctx context.Context, what string) (*Scratch, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	defer unlock()
	// Created under the writer lock, so removeTemps (which runs under it)
	// never sees a directory whose lock is not taken yet.
	if _, err := s.removeTemps(); err != nil {
		return nil, err
	}
	name, err := inroot.MkdirTemp(s.root, s.dir, tmpPrefix+what+"-*")
	if err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	f, err := inroot.CreateExcl(s.root, path.Join(name, tempDirLock), 0o600)
	if err == nil {
		if err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
		}
	}
	if err != nil {
		inroot.RemoveAll(s.root, name)
		return nil, fmt.Errorf("temporary directory %s: lock: %w", s.host(name), err)
	}
	return &Scratch{s: s, name: name, lock: f}, nil
}

// Dir returns the directory's path on this machine.
func (t *Scratch) Dir() string { return t.s.host(t.name) }

// Create makes the new file base in the directory (never replacing one),
// resolved as every file of the cache, and returns it open for writing and
// its path, which Add takes as a source.
func (t *Scratch) Create(base string) (*os.File, string, error) {
	if err := recordName(base); err != nil {
		return nil, "", err
	}
	name := path.Join(t.name, base)
	f, err := inroot.CreateExcl(t.s.root, name, 0o600)
	if err != nil {
		return nil, "", err
	}
	return f, t.s.host(name), nil
}

// Remove removes the directory and everything in it; again, it does
// nothing.
func (t *Scratch) Remove() error {
	t.once.Do(func() {
		t.err = inroot.RemoveAll(t.s.root, t.name) // still locked: nobody else removes it meanwhile
		t.lock.Close()
	})
	return t.err
}

// removeStaleTempDir removes the TempDir name (in the store's root) whose
// owner is gone and reports whether it did; one still in use (its lock
// held) is left alone. Call it with the writer lock held.
func (s *Store) removeStaleTempDir(name string) (bool, error) {
	f, err := inroot.OpenLock(s.root, path.Join(name, tempDirLock), false, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Killed between creating it and its lock (both under the writer lock).
	case errors.Is(err, unix.ELOOP), errors.Is(err, inroot.ErrNotRegular):
		// Not a lock this package made: no owner to wait for.
	case err != nil:
		return false, fmt.Errorf("clean temporary directory %s: %w", s.host(name), err)
	default:
		defer f.Close()
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
			return false, nil
		} else if err != nil {
			return false, fmt.Errorf("clean temporary directory %s: %w", s.host(name), err)
		}
	}
	if err := inroot.RemoveAll(s.root, name); err != nil {
		return false, fmt.Errorf("clean temporary directory: %w", err)
	}
	return true, nil
}
