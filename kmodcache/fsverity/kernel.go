package fsverity

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrOtherAlgorithm is returned by Measure for a file whose fs-verity uses
// another hash algorithm than SHA-256 (its digest cannot be compared).
var ErrOtherAlgorithm = errors.New("fs-verity with a hash algorithm other than sha256")

// measureBuf is struct fsverity_digest with room for a SHA-512 digest.
type measureBuf struct {
	alg    uint16
	size   uint16
	digest [64]byte
}

// Measure returns the fs-verity digest of the open file fd as the kernel
// holds it (FS_IOC_MEASURE_VERITY: the descriptor's hash, read without
// reading the file), in Digest's form. A file without fs-verity gives an
// error for which Absent is true.
func Measure(fd int) (string, error) {
	b := measureBuf{size: 64}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.FS_IOC_MEASURE_VERITY, uintptr(unsafe.Pointer(&b))); e != 0 {
		return "", fmt.Errorf("measure fs-verity: %w", e)
	}
	if b.alg != AlgSHA256 || b.size != sha256.Size {
		return "", fmt.Errorf("measure fs-verity: algorithm %d, %d bytes: %w", b.alg, b.size, ErrOtherAlgorithm)
	}
	return Format([sha256.Size]byte(b.digest[:sha256.Size])), nil
}

// Absent reports whether err, from Measure or Enable, says the file has no
// fs-verity (ENODATA) or its filesystem or kernel has none (ENOTTY,
// EOPNOTSUPP), rather than that something failed.
func Absent(err error) bool {
	return errors.Is(err, unix.ENODATA) || errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EOPNOTSUPP)
}

// EnableArg is struct fsverity_enable_arg: what FS_IOC_ENABLE_VERITY takes.
type EnableArg struct {
	Version       uint32
	HashAlgorithm uint32
	BlockSize     uint32
	SaltSize      uint32
	SaltPtr       uint64
	SigSize       uint32
	reserved1     uint32
	SigPtr        uint64
	reserved2     [11]uint64
}

// NewEnableArg returns the argument that enables fs-verity as Digest
// computes it: SHA-256, BlockSize, no salt, no signature.
func NewEnableArg() *EnableArg {
	return &EnableArg{Version: 1, HashAlgorithm: AlgSHA256, BlockSize: BlockSize}
}

// Enable turns fs-verity on for the open file fd (FS_IOC_ENABLE_VERITY):
// the kernel builds the Merkle tree from the file's bytes and from then on
// checks every page read against it; the file becomes read-only. fd must be
// open read-only and no one may hold the file open for writing (ETXTBSY);
// the filesystem must be mounted read-write and have fs-verity (ext4's
// verity feature).
func Enable(fd int) error {
	a := NewEnableArg()
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.FS_IOC_ENABLE_VERITY, uintptr(unsafe.Pointer(a))); e != 0 {
		return fmt.Errorf("enable fs-verity: %w", e)
	}
	return nil
}
