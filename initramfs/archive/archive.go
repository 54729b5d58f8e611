// Package archive writes initramfs images: deterministic newc ("070701") cpio
// archives, written with github.com/cavaliergopher/cpio and optionally zstd- or
// gzip-compressed, that the Linux kernel unpacks into its rootfs before running
// /init.
//
// An Archive is an in-memory tree of entries. Names are archive paths relative to
// the root, written without a leading "/" or "./" ("init", "lib/modules/x/y.ko"),
// which is what the kernel's init/initramfs.c creates relative to "/". Missing
// parent directories are added automatically (mode 0755), and the kernel, which
// never creates parents itself, sees every parent before its children because
// entries are written sorted by path.
//
// Output depends only on the entries: uid and gid are 0, every mtime is the
// archive's (0 unless SetModTime is called, see ParseSourceDateEpoch
// for SOURCE_DATE_EPOCH), inode numbers count from 1 in written order, regular files
// and symlinks have nlink 1 (so the kernel never hard-links them) and directories
// nlink 2. Nothing is taken from the host except the content and permission bits
// of files added from disk.
//
// Entries are directories, regular files and symlinks; device nodes cannot be
// added, because the library's writer has no field for their device numbers. An
// initramfs does not need one: a kernel built without CONFIG_INITRAMFS_SOURCE
// (Debian's are) first unpacks its built-in usr/default_cpio_list, which creates
// /dev/console (5, 1), and this archive is unpacked over it.
//
// Every name and symlink target is checked: absolute paths, "..", "." or empty
// components, NUL bytes, symlinks that leave the archive root and entries below a
// symlink are refused with an error naming the path.
package archive

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// permBits are the mode bits an entry may carry besides its type.
const permBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

// maxFileSize is the largest file newc can describe: its size field is 32 bits.
const maxFileSize = 1<<32 - 1

// implicitDirMode is the mode of parent directories added automatically.
const implicitDirMode = fs.ModeDir | 0o755

// Entry describes one archive entry, as listed by Entries.
type Entry struct {
	// Name is the archive path, relative to the root ("lib/modules").
	Name string
	// Mode holds the type (fs.ModeDir, fs.ModeSymlink, or none for a regular file)
	// and the permission bits.
	Mode fs.FileMode
	// Size is the length of a regular file's content.
	Size int64
	// Target is a symlink's target.
	Target string
	// Source is the host file a regular file's content is read from, if any.
	Source string
	// Implicit is true for a directory added only as the parent of another entry.
	Implicit bool
}

// node is an entry and, for regular files, where its content comes from.
type node struct {
	Entry
	data []byte // content of a file added from memory
}

// Archive is an in-memory tree of initramfs entries. The zero value is not ready
// for use; call New. An Archive is not safe for concurrent use.
type Archive struct {
	nodes map[string]*node
	mtime uint32
}

// New returns an empty archive whose entries have mtime 0.
func New() *Archive {
	return &Archive{nodes: make(map[string]*node)}
}

// SetModTime sets the mtime written for every entry. It must lie between the Unix
// epoch and 2106, the range of newc's 32-bit field.
func (a *Archive) SetModTime(t time.Time) error {
	s := t.Unix()
	if s < 0 || s > 1<<32-1 {
		return fmt.Errorf("set archive mtime: %v is outside the newc range 1970..2106", t)
	}
	a.mtime = uint32(s)
	return nil
}

// ParseSourceDateEpoch returns the time a SOURCE_DATE_EPOCH value v names
// (https://reproducible-builds.org/specs/source-date-epoch/), or the Unix epoch
// if v is empty (the variable unset). Pass it to SetModTime to honour the
// variable, which only commands read (the environment is read in cmd/).
func ParseSourceDateEpoch(v string) (time.Time, error) {
	if v == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	s, err := strconv.ParseUint(v, 10, 63)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want a non-negative decimal number of seconds: %w", v, err)
	}
	return time.Unix(int64(s), 0).UTC(), nil
}

// AddFile adds a regular file with the given content and mode. Here and in the
// other Add methods, mode holds permission bits and optionally setuid, setgid and
// sticky, as fs.ModeSetuid, fs.ModeSetgid, fs.ModeSticky or in chmod's octal form
// (0o4755); type bits are refused.
func (a *Archive) AddFile(name string, mode fs.FileMode, data []byte) error {
	mode, err := perm(name, mode)
	if err != nil {
		return err
	}
	if int64(len(data)) > maxFileSize {
		return fmt.Errorf("add file %q: %d bytes is more than newc's %d", name, len(data), int64(maxFileSize))
	}
	return a.add(&node{
		Entry: Entry{Name: name, Mode: mode, Size: int64(len(data))},
		data:  bytes.Clone(data),
	})
}

// AddFileFrom adds a regular file whose content is read from the host file src
// when the archive is written. src must not change in between; a change of size
// is detected and reported.
func (a *Archive) AddFileFrom(name string, mode fs.FileMode, src string) error {
	mode, err := perm(name, mode)
	if err != nil {
		return err
	}
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("add file %q: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("add file %q: source %s is not a regular file (%v)", name, src, fi.Mode().Type())
	}
	if fi.Size() > maxFileSize {
		return fmt.Errorf("add file %q: source %s has %d bytes, more than newc's %d", name, src, fi.Size(), int64(maxFileSize))
	}
	return a.add(&node{Entry: Entry{Name: name, Mode: mode, Size: fi.Size(), Source: src}})
}

// AddDir adds a directory with the given permission bits. Adding a directory that
// was implied as a parent sets its mode.
func (a *Archive) AddDir(name string, mode fs.FileMode) error {
	mode, err := perm(name, mode)
	if err != nil {
		return err
	}
	return a.add(&node{Entry: Entry{Name: name, Mode: fs.ModeDir | mode}})
}

// AddSymlink adds a symlink. The target must be relative and must not leave the
// archive root when resolved from the link's directory.
func (a *Archive) AddSymlink(name, target string) error {
	if err := checkName(name); err != nil {
		return fmt.Errorf("add symlink: %w", err)
	}
	if err := checkTarget(name, target); err != nil {
		return fmt.Errorf("add symlink: %w", err)
	}
	return a.add(&node{Entry: Entry{Name: name, Mode: fs.ModeSymlink | 0o777, Target: target}})
}

// Has reports whether name is an entry, explicit or implied.
func (a *Archive) Has(name string) bool {
	_, ok := a.nodes[name]
	return ok
}

// Entries returns every entry in the order they are written: sorted by name,
// which puts each directory before its contents.
func (a *Archive) Entries() []Entry {
	out := make([]Entry, 0, len(a.nodes))
	for _, name := range a.names() {
		out = append(out, a.nodes[name].Entry)
	}
	return out
}

// names returns the entry names sorted bytewise. A parent is a prefix of its
// children, so it always sorts first.
func (a *Archive) names() []string {
	names := make([]string, 0, len(a.nodes))
	for name := range a.nodes {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// unixSpecial maps Unix setuid, setgid and sticky bits, which callers may write
// as in chmod (0o4755), to their fs.FileMode bits.
var unixSpecial = []struct{ unix, mode fs.FileMode }{
	{0o4000, fs.ModeSetuid}, {0o2000, fs.ModeSetgid}, {0o1000, fs.ModeSticky},
}

// perm normalises mode to permission, setuid, setgid and sticky bits, accepting
// the latter three either as fs.FileMode bits or in Unix octal form.
func perm(name string, mode fs.FileMode) (fs.FileMode, error) {
	for _, s := range unixSpecial {
		if mode&s.unix != 0 {
			mode = mode&^s.unix | s.mode
		}
	}
	if mode&^permBits != 0 {
		return 0, fmt.Errorf("add %q: mode %v has bits other than permissions, setuid, setgid and sticky", name, mode)
	}
	return mode, nil
}

func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "regular file"
}

// add inserts n after checking its name, creating missing parents. It changes
// nothing when it fails.
func (a *Archive) add(n *node) error {
	name := n.Name
	if err := checkName(name); err != nil {
		return fmt.Errorf("add %s: %w", kind(n.Mode), err)
	}
	var missing []string
	for i := strings.IndexByte(name, '/'); i >= 0; i = nextSlash(name, i) {
		parent := name[:i]
		p, ok := a.nodes[parent]
		if !ok {
			missing = append(missing, parent)
			continue
		}
		if !p.Mode.IsDir() {
			return fmt.Errorf("add %q: parent %q is a %s, not a directory", name, parent, kind(p.Mode))
		}
	}
	if old, ok := a.nodes[name]; ok {
		switch {
		case old.Implicit && n.Mode.IsDir():
			// An explicit directory replaces the implied one.
		case old.Implicit:
			return fmt.Errorf("add %s %q: already a directory holding other entries", kind(n.Mode), name)
		default:
			same, err := sameEntry(old, n)
			if err != nil {
				return fmt.Errorf("add %q: compare with the entry already there: %w", name, err)
			}
			if !same {
				return fmt.Errorf("add %q: already in the archive as a different %s (%s)", name, kind(old.Mode), describe(old))
			}
			return nil
		}
	}
	for _, p := range missing {
		a.nodes[p] = &node{Entry: Entry{Name: p, Mode: implicitDirMode, Implicit: true}}
	}
	a.nodes[name] = n
	return nil
}

func nextSlash(s string, i int) int {
	j := strings.IndexByte(s[i+1:], '/')
	if j < 0 {
		return -1
	}
	return i + 1 + j
}

func describe(n *node) string {
	switch {
	case n.Mode.IsDir():
		return fmt.Sprintf("mode %v", n.Mode)
	case n.Mode&fs.ModeSymlink != 0:
		return fmt.Sprintf("-> %s", n.Target)
	case n.Source != "":
		return fmt.Sprintf("mode %v, %d bytes from %s", n.Mode, n.Size, n.Source)
	}
	return fmt.Sprintf("mode %v, %d bytes", n.Mode, n.Size)
}

// sameEntry reports whether two entries would be written identically.
func sameEntry(x, y *node) (bool, error) {
	if x.Mode != y.Mode || x.Target != y.Target || x.Size != y.Size {
		return false, nil
	}
	switch {
	case !x.Mode.IsRegular():
		return true, nil
	case x.Source == "" && y.Source == "":
		return bytes.Equal(x.data, y.data), nil
	case x.Source != "" && x.Source == y.Source:
		return true, nil
	}
	return sameContent(x, y)
}

// sameContent compares two regular files' content, reading host files as needed.
func sameContent(x, y *node) (bool, error) {
	rx, err := x.open()
	if err != nil {
		return false, err
	}
	defer rx.Close()
	ry, err := y.open()
	if err != nil {
		return false, err
	}
	defer ry.Close()
	bx, by := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		nx, errx := io.ReadFull(rx, bx)
		ny, erry := io.ReadFull(ry, by)
		if !bytes.Equal(bx[:nx], by[:ny]) {
			return false, nil
		}
		endx := errors.Is(errx, io.EOF) || errors.Is(errx, io.ErrUnexpectedEOF)
		endy := errors.Is(erry, io.EOF) || errors.Is(erry, io.ErrUnexpectedEOF)
		switch {
		case errx != nil && !endx:
			return false, fmt.Errorf("read %s: %w", x.Source, errx)
		case erry != nil && !endy:
			return false, fmt.Errorf("read %s: %w", y.Source, erry)
		case endx || endy:
			return endx == endy, nil
		}
	}
}

// open returns a reader of a regular file's content.
func (n *node) open() (io.ReadCloser, error) {
	if n.Source == "" {
		return io.NopCloser(bytes.NewReader(n.data)), nil
	}
	f, err := os.Open(n.Source)
	if err != nil {
		return nil, fmt.Errorf("open source of %q: %w", n.Name, err)
	}
	return f, nil
}
