package inroot

// Files and directories made and opened for writing in a tree at root, for
// code that keeps its own records there (a module cache): the parent of
// every name is resolved inside root, the last element is never followed.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// Mkdir makes the directory name of the tree at root with perm (before the
// umask); its parent must exist. A name already there fails with an error
// wrapping fs.ErrExist, whatever it is.
func Mkdir(root, name string, perm fs.FileMode) error {
	dfd, base, err := parent(root, name)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if err := retry(func() error { return unix.Mkdirat(dfd, base, uint32(perm.Perm())) }); err != nil {
		return &fs.PathError{Op: "mkdir", Path: host(root, name), Err: err}
	}
	return nil
}

// MkdirTemp makes a new directory (mode 0700) in the directory dir of the
// tree at root, named by pattern with its last "*" replaced by a random
// string, and returns its name in the tree.
func MkdirTemp(root, dir, pattern string) (string, error) {
	prefix, suffix, _ := strings.Cut(pattern, "*")
	if i := strings.LastIndex(pattern, "*"); i >= 0 {
		prefix, suffix = pattern[:i], pattern[i+1:]
	}
	for try := 0; ; try++ {
		var rnd [6]byte
		if _, err := rand.Read(rnd[:]); err != nil {
			return "", err
		}
		name := path.Join("/"+dir, prefix+hex.EncodeToString(rnd[:])+suffix)
		err := Mkdir(root, name, 0o700)
		if errors.Is(err, fs.ErrExist) && try < 16 {
			continue
		}
		if err != nil {
			return "", err
		}
		return name, nil
	}
}

// CreateExcl makes the new regular file name of the tree at root (never
// replacing anything there, a link included) with perm and returns it open
// for writing.
func CreateExcl(root, name string, perm fs.FileMode) (*os.File, error) {
	dfd, base, err := parent(root, name)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	var fd int
	err = retry(func() (err error) {
		fd, err = unix.Openat(dfd, base, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
		return err
	})
	if err != nil {
		return nil, &fs.PathError{Op: "create", Path: host(root, name), Err: err}
	}
	return os.NewFile(uintptr(fd), host(root, name)), nil
}

// OpenLock opens the regular file name of the tree at root for flock(2),
// read-write, creating it (with perm) when create is set and it is missing;
// on a read-only file system an existing file is opened read-only. A link
// there is refused, never followed, and so is any file that is not a
// regular file (a FIFO or a device is never opened for reading).
func OpenLock(root, name string, create bool, perm fs.FileMode) (*os.File, error) {
	dfd, base, err := parent(root, name)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	// Checked before it is opened, so that no device is opened at all.
	var st unix.Stat_t
	if err := retry(func() error { return unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) }); err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, &fs.PathError{Op: "open", Path: host(root, name), Err: fmt.Errorf("%w: it is %s", ErrNotRegular, kind(mode(&st)))}
	}
	flags := unix.O_RDWR | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	if create {
		flags |= unix.O_CREAT
	}
	open := func(flags int) (fd int, err error) {
		err = retry(func() (err error) {
			fd, err = unix.Openat(dfd, base, flags, uint32(perm.Perm()))
			return err
		})
		return fd, err
	}
	fd, err := open(flags)
	if err == unix.EROFS {
		fd, err = open(flags&^(unix.O_RDWR|unix.O_CREAT) | unix.O_RDONLY)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: host(root, name), Err: err}
	}
	if err := fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "stat", Path: host(root, name), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: host(root, name), Err: fmt.Errorf("%w: it is %s", ErrNotRegular, kind(mode(&st)))}
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: host(root, name), Err: err}
	}
	return os.NewFile(uintptr(fd), host(root, name)), nil
}

// SyncDir syncs the directory name of the tree at root, making its entries
// (new files, renames, removals) durable.
func SyncDir(root, name string) error {
	fd, err := openat2(root, name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := retry(func() error { return unix.Fsync(fd) }); err != nil {
		return &fs.PathError{Op: "sync", Path: host(root, name), Err: err}
	}
	return nil
}
