package inroot

// Writes into a tree at root, confined to it as reads are: the parent
// directory of every name is resolved with openat2(RESOLVE_IN_ROOT) from root
// (an absolute link means "from root", ".." stops at root, as in a chroot of
// root), and the last element is acted on with *at system calls relative to
// that directory, never followed: a link there is itself replaced, renamed or
// removed, never its target. Nothing outside root is created, changed or
// removed.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// TempPrefix starts the name of every temporary file CreateTemp makes (the
// prefix of internal/fileutil's temporary files too, so one sweep clears both).
const TempPrefix = ".tmp-"

// errRoot is the error for an operation on root itself that needs a name in it.
var errRoot = errors.New("the root itself, not a name in it")

// parent opens the directory holding name's last element, resolved inside
// root, for reading (so that it can be synced), and returns that element.
func parent(root, name string) (int, string, error) {
	clean := path.Clean("/" + name)
	if clean == "/" {
		return -1, "", &fs.PathError{Op: "open", Path: host(root, name), Err: errRoot}
	}
	fd, err := openat2(root, path.Dir(clean), unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return -1, "", err
	}
	return fd, path.Base(clean), nil
}

// retry runs a system call again while it is interrupted.
func retry(f func() error) error {
	for {
		if err := f(); err != unix.EINTR {
			return err
		}
	}
}

// MkdirAll makes the directory name and every missing parent inside root
// with perm (before the umask), as os.MkdirAll does; links met on the way are
// followed inside root.
func MkdirAll(root, name string, perm fs.FileMode) error {
	elems := split(path.Clean("/" + name))
	for i := range elems {
		p := "/" + path.Join(elems[:i+1]...)
		fd, err := openat2(root, p, unix.O_PATH|unix.O_DIRECTORY)
		if err == nil {
			unix.Close(fd)
			continue
		}
		if !errors.Is(err, unix.ENOENT) {
			return err
		}
		dfd, base, err := parent(root, p)
		if err != nil {
			return err
		}
		err = retry(func() error { return unix.Mkdirat(dfd, base, uint32(perm.Perm())) })
		unix.Close(dfd)
		if err != nil && err != unix.EEXIST {
			return &fs.PathError{Op: "mkdir", Path: host(root, p), Err: err}
		}
		// Made here or by someone else meanwhile: it must now be a
		// directory inside root (EEXIST for a dangling link is an error).
		fd, err = openat2(root, p, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return err
		}
		unix.Close(fd)
	}
	return nil
}

// Pending is a new file being written in a tree: a temporary file in its
// final directory, which Commit renames into place (atomically) and Abort
// removes.
type Pending struct {
	// File is the temporary file, open for writing.
	*os.File
	dir       int
	tmp, base string
	path      string // the final name as root joined with it, for errors
	done      bool
}

// CreateTemp starts writing the file name of the tree at root: its directory
// is resolved inside root and must exist; the temporary file is made there
// (O_EXCL|O_NOFOLLOW, mode 0600) with a name starting with TempPrefix.
func CreateTemp(root, name string) (*Pending, error) {
	dfd, base, err := parent(root, name)
	if err != nil {
		return nil, err
	}
	for try := 0; ; try++ {
		var rnd [6]byte
		if _, err := rand.Read(rnd[:]); err != nil {
			unix.Close(dfd)
			return nil, err
		}
		tmp := TempPrefix + base + "-" + hex.EncodeToString(rnd[:])
		if len(tmp) > 255 {
			tmp = TempPrefix + hex.EncodeToString(rnd[:])
		}
		var fd int
		err := retry(func() (err error) {
			fd, err = unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
			return err
		})
		if err == unix.EEXIST && try < 16 {
			continue
		}
		if err != nil {
			unix.Close(dfd)
			return nil, &fs.PathError{Op: "create", Path: host(root, name), Err: err}
		}
		p := host(root, name)
		return &Pending{File: os.NewFile(uintptr(fd), filepath.Join(filepath.Dir(p), tmp)), dir: dfd, tmp: tmp, base: base, path: p}, nil
	}
}

// Commit gives the file perm, syncs it, renames it over name (a link there
// is replaced, not followed) and syncs the directory.
func (p *Pending) Commit(perm fs.FileMode) error {
	if p.done {
		return &fs.PathError{Op: "commit", Path: p.path, Err: fs.ErrClosed}
	}
	err := p.File.Chmod(perm)
	if err == nil {
		err = p.File.Sync()
	}
	if cerr := p.File.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if rerr := retry(func() error { return unix.Renameat(p.dir, p.tmp, p.dir, p.base) }); rerr != nil {
			err = &fs.PathError{Op: "rename", Path: p.path, Err: rerr}
		}
	}
	if err != nil {
		p.Abort()
		return err
	}
	p.done = true
	defer unix.Close(p.dir)
	if err := retry(func() error { return unix.Fsync(p.dir) }); err != nil {
		return &fs.PathError{Op: "sync", Path: filepath.Dir(p.path), Err: err}
	}
	return nil
}

// Abort closes and removes the temporary file; it does nothing after Commit
// or another Abort.
func (p *Pending) Abort() {
	if p.done {
		return
	}
	p.done = true
	p.File.Close()
	unix.Unlinkat(p.dir, p.tmp, 0)
	unix.Close(p.dir)
}

// WriteFrom writes what r holds to the file name of the tree at root
// (atomically: a reader sees the old file or the whole new one) with perm.
// name's directory must exist (MkdirAll).
func WriteFrom(root, name string, r io.Reader, perm fs.FileMode) error {
	p, err := CreateTemp(root, name)
	if err != nil {
		return err
	}
	if _, err := io.Copy(p.File, r); err != nil {
		p.Abort()
		return &fs.PathError{Op: "write", Path: p.path, Err: err}
	}
	return p.Commit(perm)
}

// WriteFile writes data to the file name of the tree at root as WriteFrom does.
func WriteFile(root, name string, data []byte, perm fs.FileMode) error {
	p, err := CreateTemp(root, name)
	if err != nil {
		return err
	}
	if _, err := p.File.Write(data); err != nil {
		p.Abort()
		return &fs.PathError{Op: "write", Path: p.path, Err: err}
	}
	return p.Commit(perm)
}

// CopyFile copies src, a regular file named on this machine (a kernel image,
// an initramfs built on the host, a key), to name in the tree at root as
// WriteFrom does.
func CopyFile(root, name, src string, perm fs.FileMode) error {
	abs, err := filepath.Abs(src)
	if err != nil {
		return &fs.PathError{Op: "open", Path: src, Err: err}
	}
	f, err := Open("/", abs)
	if err != nil {
		return err
	}
	defer f.Close()
	return WriteFrom(root, name, f, perm)
}

// Rename renames oldname to newname, both in the tree at root; neither last
// element is followed when it is a link.
func Rename(root, oldname, newname string) error {
	ofd, obase, err := parent(root, oldname)
	if err != nil {
		return err
	}
	defer unix.Close(ofd)
	nfd, nbase, err := parent(root, newname)
	if err != nil {
		return err
	}
	defer unix.Close(nfd)
	if err := retry(func() error { return unix.Renameat(ofd, obase, nfd, nbase) }); err != nil {
		return &os.LinkError{Op: "rename", Old: host(root, oldname), New: host(root, newname), Err: err}
	}
	return nil
}

// Remove removes the file or empty directory name of the tree at root (a
// link is removed itself, never its target).
func Remove(root, name string) error {
	dfd, base, err := parent(root, name)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	err = retry(func() error { return unix.Unlinkat(dfd, base, 0) })
	if err == unix.EISDIR {
		err = retry(func() error { return unix.Unlinkat(dfd, base, unix.AT_REMOVEDIR) })
	}
	if err != nil {
		return &fs.PathError{Op: "remove", Path: host(root, name), Err: err}
	}
	return nil
}

// RemoveAll removes name of the tree at root and everything under it, as
// os.RemoveAll does: a missing name is no error. The walk is relative to
// directory descriptors and never follows a link (a link is removed itself).
func RemoveAll(root, name string) error {
	dfd, base, err := parent(root, name)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	return removeAllAt(dfd, base, host(root, name))
}

// removeAllAt removes base in the directory dfd and, when it is a
// directory, everything under it; p names it for errors.
func removeAllAt(dfd int, base, p string) error {
	var st unix.Stat_t
	err := retry(func() error { return unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) })
	if err == unix.ENOENT {
		return nil
	}
	if err != nil {
		return &fs.PathError{Op: "lstat", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := retry(func() error { return unix.Unlinkat(dfd, base, 0) }); err != nil && err != unix.ENOENT {
			return &fs.PathError{Op: "remove", Path: p, Err: err}
		}
		return nil
	}
	var fd int
	err = retry(func() (err error) {
		fd, err = unix.Openat(dfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return &fs.PathError{Op: "open", Path: p, Err: err}
	}
	d := os.NewFile(uintptr(fd), p)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return &fs.PathError{Op: "readdir", Path: p, Err: err}
	}
	for _, n := range names {
		if err := removeAllAt(int(d.Fd()), n, filepath.Join(p, n)); err != nil {
			return err
		}
	}
	if err := retry(func() error { return unix.Unlinkat(dfd, base, unix.AT_REMOVEDIR) }); err != nil && err != unix.ENOENT {
		return &fs.PathError{Op: "remove", Path: p, Err: err}
	}
	return nil
}

// Symlink makes name in the tree at root a symbolic link to target (written
// as given: an absolute target means "from root" to readers of this package).
func Symlink(target, root, name string) error {
	dfd, base, err := parent(root, name)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if err := retry(func() error { return unix.Symlinkat(target, dfd, base) }); err != nil {
		return &fs.PathError{Op: "symlink", Path: host(root, name), Err: err}
	}
	return nil
}

// Resolve returns the path on this machine of name in the tree at root with
// every link resolved inside root (EvalSymlinks), for code that takes a path
// (a module tree, a cache directory) rather than a descriptor. name must
// exist; a link swapped in after Resolve returns is not seen.
func Resolve(root, name string) (string, error) {
	p, err := EvalSymlinks(root, name)
	if err != nil {
		return "", err
	}
	if root == "" {
		root = "."
	}
	return filepath.Join(root, p), nil
}

// Host names the file name of the tree at root as the errors of this package
// do: root joined with name cleaned as inside root.
func Host(root, name string) string { return host(root, name) }

// CopyTree copies the directory tree src on this machine (unpacked package
// files, a DESTDIR of make install) into the directory name of the tree at
// root, made if missing: directories are made (or kept: a link to a
// directory in root is followed inside root), regular files written
// atomically with their mode, links made anew with their target as written.
// src's own links are never followed; any other kind of file is an error.
func CopyTree(root, name, src string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		dst := path.Join("/"+name, filepath.ToSlash(rel))
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		switch {
		case fi.IsDir():
			return MkdirAll(root, dst, mode)
		case fi.Mode().IsRegular():
			return CopyFile(root, dst, p, mode)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := Remove(root, dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			return Symlink(target, root, dst)
		}
		return &fs.PathError{Op: "copy", Path: p, Err: fmt.Errorf("%w: it is %s", ErrNotRegular, kind(fi.Mode()))}
	})
}
