// Package fileutil copies and writes files, in place or atomically: through a
// temporary file in the destination's directory that is renamed into place, so
// a reader (or a crash) sees the old file or the new one, never half of one.
package fileutil

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// TempPrefix starts the name of every temporary file this package makes.
const TempPrefix = ".tmp-"

// Temp is a temporary file beside its destination, renamed into place by Commit.
type Temp struct {
	*os.File
	dst       string
	committed bool
}

// CreateTemp creates a temporary file for dst in dst's directory, named
// TempPrefix, dst's base name, "-" and a random suffix.
func CreateTemp(dst string) (*Temp, error) {
	f, err := os.CreateTemp(filepath.Dir(dst), TempPrefix+filepath.Base(dst)+"-*")
	if err != nil {
		return nil, err
	}
	return &Temp{File: f, dst: dst}, nil
}

// Commit sets the temporary file's mode to perm, closes it and renames it to
// its destination; with sync it also syncs the file before the rename and the
// directory after it.
func (t *Temp) Commit(perm fs.FileMode, sync bool) error {
	return t.commit(perm, sync, func(tmp string) error { return os.Rename(tmp, t.dst) })
}

// commit is Commit with the rename given: rename moves the temporary file
// (named by its argument) to t.dst.
func (t *Temp) commit(perm fs.FileMode, sync bool, rename func(tmp string) error) error {
	if err := t.Chmod(perm); err != nil {
		return err
	}
	if sync {
		if err := t.Sync(); err != nil {
			return err
		}
	}
	if err := t.Close(); err != nil {
		return err
	}
	if err := rename(t.Name()); err != nil {
		return err
	}
	t.committed = true
	if sync {
		return SyncDir(filepath.Dir(t.dst))
	}
	return nil
}

// Abort closes and removes the temporary file unless Commit renamed it; it is
// meant to be deferred right after CreateTemp.
func (t *Temp) Abort() {
	if t.committed {
		return
	}
	t.Close()
	os.Remove(t.Name())
}

// SyncDir syncs a directory, making its entries (renames, removals) durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// WriteAtomic replaces path with data through a temporary file (see Commit for
// perm and sync); path's directory must exist.
func WriteAtomic(path string, data []byte, perm fs.FileMode, sync bool) error {
	t, err := CreateTemp(path)
	if err != nil {
		return err
	}
	defer t.Abort()
	if _, err := t.Write(data); err != nil {
		return err
	}
	return t.Commit(perm, sync)
}

// WriteAtomicAll is WriteAtomic that first creates path's missing parent
// directories (mode 0755).
func WriteAtomicAll(path string, data []byte, perm fs.FileMode, sync bool) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return WriteAtomic(path, data, perm, sync)
}

// WriteNew writes data to a new file in dir, named by pattern with its last
// "*" replaced by a random string (as os.CreateTemp names files), through a
// temporary file renamed into place without replacing anything (see Commit for
// perm and sync): a reader of dir sees the whole file or none. It returns the
// new file's path; dir must exist.
func WriteNew(dir, pattern string, data []byte, perm fs.FileMode, sync bool) (string, error) {
	for try := 0; ; try++ {
		var rnd [8]byte
		if _, err := rand.Read(rnd[:]); err != nil {
			return "", err
		}
		name := pattern + hex.EncodeToString(rnd[:])
		if i := strings.LastIndex(pattern, "*"); i >= 0 {
			name = pattern[:i] + hex.EncodeToString(rnd[:]) + pattern[i+1:]
		}
		dst := filepath.Join(dir, name)
		t, err := CreateTemp(dst)
		if err != nil {
			return "", err
		}
		if _, err := t.Write(data); err != nil {
			t.Abort()
			return "", err
		}
		err = t.commit(perm, sync, func(tmp string) error {
			if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE); err != nil {
				return &os.LinkError{Op: "rename", Old: tmp, New: dst, Err: err}
			}
			return nil
		})
		t.Abort()
		if errors.Is(err, unix.EEXIST) && try < 16 {
			continue
		}
		if err != nil {
			return "", err
		}
		return dst, nil
	}
}

// Symlink makes link a symbolic link to target, replacing what link was
// (a file or a link, never a directory) atomically: a new link beside it is
// renamed over it and the directory synced, so a reader sees the old link or
// the new one, never none.
func Symlink(target, link string) error {
	for try := 0; ; try++ {
		var rnd [6]byte
		if _, err := rand.Read(rnd[:]); err != nil {
			return err
		}
		tmp := filepath.Join(filepath.Dir(link), TempPrefix+filepath.Base(link)+"-"+hex.EncodeToString(rnd[:]))
		err := os.Symlink(target, tmp)
		if errors.Is(err, fs.ErrExist) && try < 16 {
			continue
		}
		if err != nil {
			return err
		}
		if err := os.Rename(tmp, link); err != nil {
			os.Remove(tmp)
			return err
		}
		return SyncDir(filepath.Dir(link))
	}
}

// Publish moves tmp, a finished file another program wrote (apt-get
// download, mmdebstrap), to dst atomically and durably: tmp is synced,
// renamed over dst, and dst's directory synced. Both must be on one
// filesystem.
func Publish(tmp, dst string) error {
	f, err := os.Open(tmp)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(dst))
}

// Move renames old (a file, a link or a tree) to new durably: after the
// rename, new's directory is synced, and old's when it is another. Unlike
// Publish it does not sync what it moves: a finished output goes through
// Publish, an entry moved out of the way (or back) through Move. Both must be
// on one filesystem.
func Move(old, new string) error {
	if err := os.Rename(old, new); err != nil {
		return err
	}
	if err := SyncDir(filepath.Dir(new)); err != nil {
		return err
	}
	if filepath.Dir(old) != filepath.Dir(new) {
		return SyncDir(filepath.Dir(old))
	}
	return nil
}

// CopyAtomic replaces dst with a copy of src through a temporary file (see
// Commit for perm and sync); dst's directory must exist.
func CopyAtomic(src, dst string, perm fs.FileMode, sync bool) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	t, err := CreateTemp(dst)
	if err != nil {
		return err
	}
	defer t.Abort()
	if _, err := io.Copy(t, in); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return t.Commit(perm, sync)
}

// CopyFile copies src to dst in place: dst is truncated, or created with mode
// perm (less the umask).
func CopyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
