// Package repocheck checks what the repository tracks: no built program (an
// ELF file), no file over MaxFile that is not a listed fixture, and no test
// named in docs/threat-model.md that does not exist. Its tests run in the
// unit tier (make unit): they read only the checkout.
package repocheck

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// MaxFile is the largest file the repository tracks without a reason.
const MaxFile = 1 << 20

// elfMagic starts every ELF file (programs, objects, kernel modules).
var elfMagic = []byte{0x7f, 'E', 'L', 'F'}

// Check reads the first bytes and the size of each path (relative to root,
// as `git ls-files` prints them) and returns one problem a line for every
// ELF file and every file over MaxFile that fixtures (path → reason) does not
// list. Links and paths missing from the working tree (deleted, not yet
// committed) are skipped; a fixture that is not among paths is a problem
// too, so the list cannot go stale.
func Check(root string, paths []string, fixtures map[string]string) []string {
	var probs []string
	for _, p := range paths {
		fi, err := os.Lstat(filepath.Join(root, p))
		if errors.Is(err, fs.ErrNotExist) || err == nil && !fi.Mode().IsRegular() {
			continue
		}
		if err != nil {
			probs = append(probs, fmt.Sprintf("%s: %v", p, err))
			continue
		}
		head, err := readHead(filepath.Join(root, p), len(elfMagic))
		if err != nil {
			probs = append(probs, fmt.Sprintf("%s: %v", p, err))
			continue
		}
		if bytes.Equal(head, elfMagic) {
			probs = append(probs, fmt.Sprintf("%s: an ELF file (a built program or object) is tracked: git rm --cached it and ignore it", p))
		}
		if fi.Size() > MaxFile {
			if _, ok := fixtures[p]; !ok {
				probs = append(probs, fmt.Sprintf("%s: %d bytes, over %d, and not a listed fixture (list it with its reason, or keep it out of the repository)", p, fi.Size(), MaxFile))
			}
		}
	}
	for _, f := range slices.Sorted(maps.Keys(fixtures)) {
		if !slices.Contains(paths, f) {
			probs = append(probs, fmt.Sprintf("%s: listed as a fixture but not tracked", f))
		} else if strings.TrimSpace(fixtures[f]) == "" {
			probs = append(probs, fmt.Sprintf("%s: listed as a fixture without a reason", f))
		}
	}
	return probs
}

func readHead(p string, n int) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, n)
	m, err := io.ReadFull(f, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b[:m], nil
}
