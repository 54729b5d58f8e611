package archive

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/cavaliergopher/cpio"

	"github.com/kpreload/kpreload/internal/fileutil"
)

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Encode writes the archive to w as a newc cpio stream compressed with c and
// returns the number of bytes written to w. The same entries give the same bytes,
// whatever order they were added in.
func (a *Archive) Encode(w io.Writer, c Compression) (int64, error) {
	if err := a.checkSymlinks(); err != nil {
		return 0, fmt.Errorf("encode initramfs: %w", err)
	}
	cw := &countingWriter{w: w}
	zw, err := compressor(cw, c)
	if err != nil {
		return cw.n, fmt.Errorf("encode initramfs: %w", err)
	}
	bw := bufio.NewWriterSize(zw, 256<<10)
	if err := a.encodeCpio(bw); err != nil {
		zw.Close()
		return cw.n, fmt.Errorf("encode initramfs: %w", err)
	}
	if err := bw.Flush(); err != nil {
		zw.Close()
		return cw.n, fmt.Errorf("encode initramfs: %s: %w", c, err)
	}
	if err := zw.Close(); err != nil {
		return cw.n, fmt.Errorf("encode initramfs: finish %s stream: %w", c, err)
	}
	return cw.n, nil
}

// WriteFile writes the archive compressed with c to path, atomically: a temporary
// file in the same directory is synced and renamed over path once complete
// (fileutil). The file gets
// mode 0644.
func (a *Archive) WriteFile(path string, c Compression) error {
	f, err := fileutil.CreateTemp(path)
	if err != nil {
		return fmt.Errorf("write initramfs %s: %w", path, err)
	}
	defer f.Abort()
	if _, err := a.Encode(f, c); err != nil {
		return fmt.Errorf("write initramfs %s: %w", path, err)
	}
	if err := f.Commit(0o644, true); err != nil {
		return fmt.Errorf("write initramfs %s: %w", path, err)
	}
	return nil
}

// checkSymlinks resolves every symlink with the archive's own symlinks followed,
// catching escapes that only chains of links reveal (a -> .., b -> a/../x).
func (a *Archive) checkSymlinks() error {
	lookup := func(p string) (string, bool) {
		n, ok := a.nodes[p]
		if !ok || n.Mode&fs.ModeSymlink == 0 {
			return "", false
		}
		return n.Target, true
	}
	for _, name := range a.names() {
		n := a.nodes[name]
		if n.Mode&fs.ModeSymlink == 0 {
			continue
		}
		if err := resolveInside(name, n.Target, lookup); err != nil {
			return err
		}
	}
	return nil
}

// encodeCpio writes every entry in sorted order and the trailer with
// github.com/cavaliergopher/cpio's newc writer. Every header is built here in
// full, so the library adds nothing of its own: inode numbers count from 1 in
// written order, nlink is 2 for directories and 1 otherwise, uid and gid are 0,
// every mtime is the archive's and the checksum stays 0, which keeps the magic
// 070701 (in v1.0.1 a non-zero Checksum would also switch the library's shared
// magic to 070702 for every later archive). A symlink's target is its content,
// as newc stores it.
func (a *Archive) encodeCpio(w io.Writer) error {
	cw := cpio.NewWriter(w)
	for i, name := range a.names() {
		n := a.nodes[name]
		h := &cpio.Header{
			Name:    name,
			Mode:    cpioMode(n.Mode),
			Links:   1,
			ModTime: time.Unix(int64(a.mtime), 0),
			Inode:   int64(i + 1),
		}
		switch {
		case n.Mode.IsDir():
			h.Links = 2
		case n.Mode&fs.ModeSymlink != 0:
			h.Size = int64(len(n.Target))
		default:
			h.Size = n.Size
		}
		if err := cw.WriteHeader(h); err != nil {
			return fmt.Errorf("entry %q: write cpio header: %w", name, err)
		}
		switch {
		case n.Mode&fs.ModeSymlink != 0:
			if _, err := io.WriteString(cw, n.Target); err != nil {
				return fmt.Errorf("entry %q: write symlink target: %w", name, err)
			}
		case n.Mode.IsRegular():
			if err := copyContent(cw, n); err != nil {
				return err
			}
		}
	}
	if err := cw.Close(); err != nil {
		return fmt.Errorf("write cpio trailer: %w", err)
	}
	return nil
}

// copyContent writes exactly n.Size bytes of a regular file's content to w.
func copyContent(w io.Writer, n *node) error {
	if n.Source == "" {
		if _, err := w.Write(n.data); err != nil {
			return fmt.Errorf("entry %q: write content: %w", n.Name, err)
		}
		return nil
	}
	f, err := os.Open(n.Source)
	if err != nil {
		return fmt.Errorf("entry %q: %w", n.Name, err)
	}
	defer f.Close()
	got, err := io.Copy(w, io.LimitReader(f, n.Size))
	if err != nil {
		return fmt.Errorf("entry %q: copy %s: %w", n.Name, n.Source, err)
	}
	var extra [1]byte
	if k, _ := f.Read(extra[:]); got != n.Size || k > 0 {
		return fmt.Errorf("entry %q: %s changed size since it was added (%d bytes then)", n.Name, n.Source, n.Size)
	}
	return nil
}

// cpioMode converts a Go file mode (a directory, symlink or regular file) to
// newc's st_mode bits.
func cpioMode(m fs.FileMode) cpio.FileMode {
	v := cpio.FileMode(m.Perm())
	if m&fs.ModeSetuid != 0 {
		v |= cpio.ModeSetuid
	}
	if m&fs.ModeSetgid != 0 {
		v |= cpio.ModeSetgid
	}
	if m&fs.ModeSticky != 0 {
		v |= cpio.ModeSticky
	}
	switch {
	case m.IsDir():
		v |= cpio.TypeDir
	case m&fs.ModeSymlink != 0:
		v |= cpio.TypeSymlink
	default:
		v |= cpio.TypeReg
	}
	return v
}
