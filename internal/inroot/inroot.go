// Package inroot reads the files of a system tree mounted at a root directory
// (the live system "/", a mounted image, a fixture) so that nothing read comes
// from outside it and nothing read is unbounded.
//
// Every path is resolved by the kernel with openat2(2) and
// RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS: the path, and every symlink met on the
// way, is resolved as if root were "/", so an absolute link, a relative link
// with "..", or ".." in the path itself never leaves root (Linux 5.6 or later).
// Files are checked before they are opened for reading: only a regular file
// (S_ISREG) is opened, with O_NONBLOCK and O_NOCTTY, so a FIFO, a device node
// or a socket is refused instead of hanging or streaming forever. ReadFile
// reads at most max+1 bytes and fails when the file holds more, whatever its
// size says (procfs and sysfs files report 0 or 4096), so it never allocates
// more than max+1 bytes.
//
// A name is a path inside root: "/proc/devices" and "proc/devices" are the
// same file. Errors are *fs.PathError naming the file as root joined with
// name, and wrap fs.ErrNotExist, ErrNotRegular or ErrTooLarge where they apply.
package inroot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Bounds for ReadFile, by the kind of file read.
const (
	// MaxAttr bounds a sysfs attribute (the kernel gives at most a page of
	// 4 KiB; the margin covers larger pages).
	MaxAttr = 64 << 10
	// MaxText bounds a small text file: /proc/devices, /proc/driver/nvidia/*,
	// kpreload's activation record, a linker configuration file.
	MaxText = 1 << 20
	// MaxLarge bounds a larger structured file: /etc/ld.so.cache, a CDI spec,
	// the boot report, an OCI bundle's config.json.
	MaxLarge = 16 << 20
)

// ErrNotRegular is wrapped by the error for a file that is not a regular file
// where one is expected (a FIFO, a device, a socket, a directory).
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is wrapped by the error of ReadFile for a file holding more
// than the bound given.
var ErrTooLarge = errors.New("file too large")

// maxLinks is how many symlinks EvalSymlinks follows, as the kernel (MAXSYMLINKS).
const maxLinks = 40

// host names a file for errors: root joined with name cleaned as inside
// root (where the kernel looks for it).
func host(root, name string) string {
	if root == "" {
		root = "."
	}
	return filepath.Join(root, path.Clean("/"+name))
}

// openat2 opens name under root with flags, resolving it inside root; it
// retries while the kernel asks to (EAGAIN: a rename raced the resolution).
func openat2(root, name string, flags uint64) (int, error) {
	if root == "" {
		root = "."
	}
	if name == "" {
		name = "."
	}
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rfd)
	how := unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	for try := 0; ; try++ {
		fd, err := unix.Openat2(rfd, name, &how)
		if err == unix.EINTR || (err == unix.EAGAIN && try < 16) {
			continue
		}
		if err == unix.ENOSYS {
			err = fmt.Errorf("openat2 is not available (Linux 5.6 or later is needed): %w", err)
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: host(root, name), Err: err}
		}
		return fd, nil
	}
}

// kind names the type of a file mode for errors.
func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	case m.IsDir():
		return "a directory"
	}
	return "of an unknown type"
}

// openRegular opens the regular file name for reading: it is resolved and
// checked through an O_PATH descriptor first, so no other kind of file is
// opened for reading, then opened (O_NONBLOCK, O_NOCTTY: a file swapped in
// meanwhile cannot block or become a terminal) and checked again to be that
// same regular file.
func openRegular(root, name string) (int, *unix.Stat_t, error) {
	pfd, err := openat2(root, name, unix.O_PATH)
	if err != nil {
		return -1, nil, err
	}
	var before unix.Stat_t
	err = fstat(pfd, &before)
	unix.Close(pfd)
	if err != nil {
		return -1, nil, &fs.PathError{Op: "stat", Path: host(root, name), Err: err}
	}
	if before.Mode&unix.S_IFMT != unix.S_IFREG {
		return -1, nil, &fs.PathError{Op: "open", Path: host(root, name), Err: fmt.Errorf("%w: it is %s", ErrNotRegular, kind(mode(&before)))}
	}
	fd, err := openat2(root, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return -1, nil, err
	}
	var st unix.Stat_t
	if err := fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, nil, &fs.PathError{Op: "stat", Path: host(root, name), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Dev != before.Dev || st.Ino != before.Ino {
		unix.Close(fd)
		return -1, nil, &fs.PathError{Op: "open", Path: host(root, name), Err: fmt.Errorf("%w: it changed while being opened", ErrNotRegular)}
	}
	return fd, &st, nil
}

func fstat(fd int, st *unix.Stat_t) error {
	for {
		if err := unix.Fstat(fd, st); err != unix.EINTR {
			return err
		}
	}
}

// Open opens the regular file name of the tree at root for reading; the
// caller bounds what it reads (ReadFile does).
func Open(root, name string) (*os.File, error) {
	fd, _, err := openRegular(root, name)
	if err != nil {
		return nil, err
	}
	// Reads of regular files do not block; the os package then reads it as
	// an ordinary blocking file.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: host(root, name), Err: err}
	}
	return os.NewFile(uintptr(fd), host(root, name)), nil
}

// ReadFile reads the regular file name of the tree at root, failing with an
// error wrapping ErrTooLarge when it holds more than max bytes.
func ReadFile(root, name string, max int64) ([]byte, error) {
	fd, st, err := openRegular(root, name)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	// The size is a hint only (procfs and sysfs say 0 or 4096): room for it
	// and one byte more, within the bound, grown as reads fill it.
	size := int64(512)
	if st.Size >= size {
		size = st.Size + 1
	}
	size = min(size, max+1)
	buf := make([]byte, 0, size)
	for {
		if int64(len(buf)) > max {
			return nil, &fs.PathError{Op: "read", Path: host(root, name), Err: fmt.Errorf("%w: more than %d bytes", ErrTooLarge, max)}
		}
		if len(buf) == cap(buf) {
			grown := min(int64(cap(buf))*2, max+1)
			buf = append(make([]byte, 0, grown), buf...)
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: host(root, name), Err: err}
		}
		if n <= 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// ReadPath reads the regular file at path (relative to the working
// directory, links followed as usual) with the checks and bound of ReadFile;
// it is for files a caller names directly rather than inside a root.
func ReadPath(file string, max int64) ([]byte, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: file, Err: err}
	}
	b, err := ReadFile("/", abs, max)
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path == abs {
		pe.Path = file
	}
	return b, err
}

// Stat returns the file information of name in the tree at root, following
// links inside root.
func Stat(root, name string) (fs.FileInfo, error) {
	return stat(root, name, unix.O_PATH)
}

// Lstat is Stat for the link itself when name's last element is a symlink.
func Lstat(root, name string) (fs.FileInfo, error) {
	return stat(root, name, unix.O_PATH|unix.O_NOFOLLOW)
}

func stat(root, name string, flags uint64) (fs.FileInfo, error) {
	fd, err := openat2(root, name, flags)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := fstat(fd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: host(root, name), Err: err}
	}
	return &fileInfo{name: path.Base(path.Clean("/" + name)), st: st}, nil
}

// Readlink returns the target of the symlink name in the tree at root, as
// written in the link (the links before it are resolved inside root).
func Readlink(root, name string) (string, error) {
	fd, err := openat2(root, name, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(fd, "", buf)
		if err == unix.EINTR {
			continue
		}
		if err == unix.ENOENT {
			err = unix.EINVAL // the empty path names a file that is not a link
		}
		if err != nil {
			return "", &fs.PathError{Op: "readlink", Path: host(root, name), Err: err}
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// ReadDir lists the directory name of the tree at root, sorted by name; each
// entry's type and Info are those of the entry itself (a link stays a link).
func ReadDir(root, name string) ([]fs.DirEntry, error) {
	fd, err := openat2(root, name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), host(root, name))
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: host(root, name), Err: err}
	}
	sort.Strings(names)
	ents := make([]fs.DirEntry, 0, len(names))
	for _, n := range names {
		var st unix.Stat_t
		err := unix.Fstatat(int(f.Fd()), n, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == unix.ENOENT {
			continue // removed since it was listed
		}
		if err != nil {
			return nil, &fs.PathError{Op: "lstat", Path: filepath.Join(host(root, name), n), Err: err}
		}
		ents = append(ents, fs.FileInfoToDirEntry(&fileInfo{name: n, st: st}))
	}
	return ents, nil
}

// EvalSymlinks returns name with every symlink resolved as the kernel
// resolves it inside root: a clean absolute path of the tree ("/usr/lib/..."),
// which must exist.
func EvalSymlinks(root, name string) (string, error) {
	resolved := "/"
	rest := split(name)
	links := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		if c == ".." {
			resolved = path.Dir(resolved)
			continue
		}
		next := path.Join(resolved, c)
		fi, err := Lstat(root, next)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			if !fi.IsDir() && len(rest) > 0 {
				return "", &fs.PathError{Op: "lstat", Path: host(root, path.Join(next, path.Join(rest...))), Err: unix.ENOTDIR}
			}
			resolved = next
			continue
		}
		if links++; links > maxLinks {
			return "", &fs.PathError{Op: "readlink", Path: host(root, name), Err: unix.ELOOP}
		}
		target, err := Readlink(root, next)
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			resolved = "/"
		}
		rest = append(split(target), rest...)
	}
	return resolved, nil
}

// split returns the elements of a slash path, without empty and "." ones.
func split(p string) []string {
	var out []string
	for _, e := range strings.Split(p, "/") {
		if e != "" && e != "." {
			out = append(out, e)
		}
	}
	return out
}

// Glob returns the paths of the tree at root (clean, absolute in the tree)
// matching pattern, in lexical order, with the syntax of path.Match in each
// element. Directories that cannot be read are skipped, as filepath.Glob does;
// the only error is path.ErrBadPattern.
func Glob(root, pattern string) ([]string, error) {
	if _, err := path.Match(pattern, ""); err != nil {
		return nil, err
	}
	matches := []string{"/"}
	listed := false // whether the matches come from directory listings (so exist)
	for _, e := range split(pattern) {
		var next []string
		listed = hasMeta(e)
		for _, dir := range matches {
			if !listed {
				next = append(next, path.Join(dir, e))
				continue
			}
			ents, err := ReadDir(root, dir)
			if err != nil {
				continue
			}
			for _, ent := range ents {
				if ok, _ := path.Match(e, ent.Name()); ok {
					next = append(next, path.Join(dir, ent.Name()))
				}
			}
		}
		matches = next
	}
	var out []string
	for _, m := range matches {
		if listed {
			out = append(out, m)
		} else if _, err := Lstat(root, m); err == nil {
			out = append(out, m)
		}
	}
	sort.Strings(out)
	return out, nil
}

func hasMeta(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', '\\':
			return true
		}
	}
	return false
}

// fileInfo is fs.FileInfo from a stat(2) buffer.
type fileInfo struct {
	name string
	st   unix.Stat_t
}

func (fi *fileInfo) Name() string       { return fi.name }
func (fi *fileInfo) Size() int64        { return fi.st.Size }
func (fi *fileInfo) Mode() fs.FileMode  { return mode(&fi.st) }
func (fi *fileInfo) ModTime() time.Time { return time.Unix(fi.st.Mtim.Unix()) }
func (fi *fileInfo) IsDir() bool        { return fi.Mode().IsDir() }
func (fi *fileInfo) Sys() any           { return &fi.st }

// mode converts st_mode to an fs.FileMode as the os package does.
func mode(st *unix.Stat_t) fs.FileMode {
	m := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	}
	if st.Mode&unix.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if st.Mode&unix.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if st.Mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}
