// Package fsverity computes a file's fs-verity digest from its bytes, as the
// kernel and fsverity-utils' "fsverity digest" do (SHA-256, 4096-byte
// blocks, no salt), and asks the kernel for the digest of a file that has
// fs-verity enabled (FS_IOC_MEASURE_VERITY) or enables it
// (FS_IOC_ENABLE_VERITY).
//
// The algorithm is the one of the kernel's Documentation/filesystems/fsverity.rst:
// the file's data, in 4096-byte blocks (the last one zero-padded), is hashed
// block by block; the hashes, concatenated and cut into 4096-byte blocks
// (the last zero-padded), are hashed again, level by level, until one block
// is left, whose hash is the root hash (a file of one block or less has the
// hash of that block as its root hash; an empty file all zeros). The
// fs-verity digest is the SHA-256 of the 256-byte fsverity_descriptor:
// version 1, algorithm, log2 of the block size, salt size, the file size and
// the root hash.
package fsverity

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
)

// BlockSize is the Merkle tree block size the digests here use: the page
// size of x86-64, which every kernel with fs-verity supports.
const BlockSize = 4096

// AlgSHA256 is FS_VERITY_HASH_ALG_SHA256, the only algorithm used here.
const AlgSHA256 = 1

// Prefix starts every digest this package prints, as fsverity-utils does:
// "sha256:" and 64 hex digits.
const Prefix = "sha256:"

// Digest reads r to its end and returns its fs-verity digest, "sha256:" and
// 64 lowercase hex digits, the form "fsverity digest" prints.
func Digest(r io.Reader) (string, error) {
	var h Hash
	if _, err := io.Copy(&h, r); err != nil {
		return "", fmt.Errorf("fs-verity digest: %w", err)
	}
	return h.Sum(), nil
}

// Format writes a raw SHA-256 fs-verity digest as Digest returns it.
func Format(d [sha256.Size]byte) string { return Prefix + hex.EncodeToString(d[:]) }

// Valid reports whether s is a digest as Digest returns it.
func Valid(s string) bool {
	if len(s) != len(Prefix)+2*sha256.Size || s[:len(Prefix)] != Prefix {
		return false
	}
	for _, c := range s[len(Prefix):] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Hash computes the fs-verity digest of what is written to it; the zero
// value is ready. It keeps the data blocks' hashes (32 bytes a 4096-byte
// block) until Sum hashes them a level at a time.
type Hash struct {
	block  [BlockSize]byte
	n      int    // bytes in block
	hashes []byte // hashes of the full data blocks so far
	size   uint64
}

// Write adds p to the data; it never fails.
func (h *Hash) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		c := copy(h.block[h.n:], p)
		h.n += c
		p = p[c:]
		if h.n == BlockSize {
			sum := sha256.Sum256(h.block[:])
			h.hashes = append(h.hashes, sum[:]...)
			h.n = 0
		}
	}
	h.size += uint64(total)
	return total, nil
}

// Sum returns the fs-verity digest of the data written so far, in Digest's
// form; the Hash is not changed.
func (h *Hash) Sum() string { return Format(descriptorDigest(h.rootHash(), h.size)) }

// rootHash is the Merkle tree's root hash of the data written so far.
func (h *Hash) rootHash() [sha256.Size]byte {
	var root [sha256.Size]byte
	if h.size == 0 {
		return root // an empty file's root hash is all zeros
	}
	hashes := h.hashes
	var buf [BlockSize]byte
	if h.n > 0 {
		copy(buf[:], h.block[:h.n]) // the last data block, zero-padded
		sum := sha256.Sum256(buf[:])
		hashes = append(slices.Clip(hashes), sum[:]...)
	}
	for len(hashes) > sha256.Size {
		var next []byte
		for off := 0; off < len(hashes); off += BlockSize {
			clear(buf[:])
			copy(buf[:], hashes[off:])
			sum := sha256.Sum256(buf[:])
			next = append(next, sum[:]...)
		}
		hashes = next
	}
	copy(root[:], hashes)
	return root
}

// descriptorDigest is the SHA-256 of the fsverity_descriptor of a file of
// size bytes whose Merkle tree has root hash root (no salt).
func descriptorDigest(root [sha256.Size]byte, size uint64) [sha256.Size]byte {
	var d [256]byte
	d[0] = 1 // version
	d[1] = AlgSHA256
	d[2] = 12 // log2(BlockSize)
	d[3] = 0  // salt size
	binary.LittleEndian.PutUint64(d[8:], size)
	copy(d[16:], root[:]) // root_hash[64], then salt[32] and reserved[144], all zero
	return sha256.Sum256(d[:])
}
