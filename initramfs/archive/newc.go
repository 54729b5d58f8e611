package archive

import (
	"fmt"
	"io"
)

// newc mode bits (cpio(5), <sys/stat.h>).
const (
	newcReg     = 0o100000
	newcDir     = 0o040000
	newcSymlink = 0o120000
	newcChar    = 0o020000
	newcSetuid  = 0o4000
	newcSetgid  = 0o2000
	newcSticky  = 0o1000
)

// newcHeader is one SVR4 "new ASCII" (newc, magic 070701) cpio header. Every
// numeric field is written as 8 upper-case hex digits, as GNU cpio does; the
// check field stays 0 (it is used only by the "070702" CRC variant).
type newcHeader struct {
	ino, mode, uid, gid, nlink, mtime, fileSize uint32
	devMajor, devMinor, rdevMajor, rdevMinor    uint32
	name                                        string
}

// newcWriter writes newc records, keeping every header 4-byte aligned.
type newcWriter struct {
	w   io.Writer
	off int64
	buf []byte
}

func (nw *newcWriter) write(p []byte) error {
	n, err := nw.w.Write(p)
	nw.off += int64(n)
	if err != nil {
		return fmt.Errorf("write cpio stream: %w", err)
	}
	return nil
}

// pad writes NUL bytes up to the next multiple of 4.
func (nw *newcWriter) pad() error {
	var zero [3]byte
	if n := (4 - nw.off%4) % 4; n > 0 {
		return nw.write(zero[:n])
	}
	return nil
}

// writeHeader writes h, its NUL-terminated name and the padding after the name.
func (nw *newcWriter) writeHeader(h newcHeader) error {
	b := append(nw.buf[:0], "070701"...)
	for _, v := range []uint32{
		h.ino, h.mode, h.uid, h.gid, h.nlink, h.mtime, h.fileSize,
		h.devMajor, h.devMinor, h.rdevMajor, h.rdevMinor,
		uint32(len(h.name) + 1), 0,
	} {
		b = appendHex8(b, v)
	}
	b = append(b, h.name...)
	b = append(b, 0)
	nw.buf = b
	if err := nw.write(b); err != nil {
		return err
	}
	return nw.pad()
}

// writeTrailer writes the TRAILER!!! record that ends the archive.
func (nw *newcWriter) writeTrailer() error {
	return nw.writeHeader(newcHeader{nlink: 1, name: trailerName})
}

func appendHex8(b []byte, v uint32) []byte {
	const digits = "0123456789ABCDEF"
	for shift := 28; shift >= 0; shift -= 4 {
		b = append(b, digits[(v>>uint(shift))&0xf])
	}
	return b
}
