package archive

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
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
// file in the same directory is renamed over path once complete. The file gets
// mode 0644.
func (a *Archive) WriteFile(path string, c Compression) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write initramfs %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err := a.Encode(f, c); err != nil {
		return fmt.Errorf("write initramfs %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		return fmt.Errorf("write initramfs %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write initramfs %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write initramfs %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
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

// encodeCpio writes every entry in sorted order and the trailer.
func (a *Archive) encodeCpio(w io.Writer) error {
	nw := &newcWriter{w: w}
	for i, name := range a.names() {
		n := a.nodes[name]
		h := newcHeader{
			ino:   uint32(i + 1),
			mode:  newcMode(n.Mode),
			nlink: 1,
			mtime: a.mtime,
			name:  name,
		}
		switch {
		case n.Mode.IsDir():
			h.nlink = 2
		case n.Mode&fs.ModeSymlink != 0:
			h.fileSize = uint32(len(n.Target))
		case n.Mode&fs.ModeDevice != 0:
			h.rdevMajor, h.rdevMinor = n.Major, n.Minor
		default:
			h.fileSize = uint32(n.Size)
		}
		if err := nw.writeHeader(h); err != nil {
			return fmt.Errorf("entry %q: %w", name, err)
		}
		switch {
		case n.Mode&fs.ModeSymlink != 0:
			if err := nw.write([]byte(n.Target)); err != nil {
				return fmt.Errorf("entry %q: %w", name, err)
			}
		case n.Mode.IsRegular():
			if err := copyContent(nw, n); err != nil {
				return err
			}
		}
		if err := nw.pad(); err != nil {
			return fmt.Errorf("entry %q: %w", name, err)
		}
	}
	return nw.writeTrailer()
}

// copyContent writes exactly n.Size bytes of a regular file's content.
func copyContent(nw *newcWriter, n *node) error {
	if n.Source == "" {
		return nw.write(n.data)
	}
	f, err := os.Open(n.Source)
	if err != nil {
		return fmt.Errorf("entry %q: %w", n.Name, err)
	}
	defer f.Close()
	got, err := io.Copy(writerFunc(nw.write), io.LimitReader(f, n.Size))
	if err != nil {
		return fmt.Errorf("entry %q: copy %s: %w", n.Name, n.Source, err)
	}
	var extra [1]byte
	if k, _ := f.Read(extra[:]); got != n.Size || k > 0 {
		return fmt.Errorf("entry %q: %s changed size since it was added (%d bytes then)", n.Name, n.Source, n.Size)
	}
	return nil
}

// writerFunc adapts an all-or-error write function to io.Writer.
type writerFunc func([]byte) error

func (f writerFunc) Write(p []byte) (int, error) {
	if err := f(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// newcMode converts a Go file mode to newc's st_mode bits.
func newcMode(m fs.FileMode) uint32 {
	v := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		v |= newcSetuid
	}
	if m&fs.ModeSetgid != 0 {
		v |= newcSetgid
	}
	if m&fs.ModeSticky != 0 {
		v |= newcSticky
	}
	switch {
	case m.IsDir():
		v |= newcDir
	case m&fs.ModeSymlink != 0:
		v |= newcSymlink
	case m&fs.ModeDevice != 0:
		v |= newcChar
	default:
		v |= newcReg
	}
	return v
}
