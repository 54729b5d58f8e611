package store

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/internal/inroot"
)

// hook, when set (by tests), is called at named points of a write so a test can
// stop a writer there and kill it.
var hook func(stage string)

// at calls the test hook for stage.
func at(stage string) {
	if hook != nil {
		hook(stage)
	}
}

// isTemp reports whether a directory entry name is a writer's temporary file.
func isTemp(name string) bool { return strings.HasPrefix(name, tmpPrefix) }

// writeAtomic stores data as dir/name: a temporary file in dir, synced, renamed
// into place, then dir synced. stage names the test hook called between the
// write and the rename (stage+"-temp").
func writeAtomic(dir, name string, data []byte, perm os.FileMode, stage string) error {
	path := filepath.Join(dir, name)
	f, err := fileutil.CreateTemp(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer f.Abort()
	if _, err := f.Write(data); err != nil {
		return err // names the temporary file
	}
	at(stage + "-temp")
	if err := f.Commit(perm, true); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// hashFile returns the hex SHA-256 and size of a file.
func hashFile(path string) (string, int64, error) {
	f, err := inroot.OpenPath(path)
	if err != nil {
		return "", 0, fmt.Errorf("hash: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// putObject copies src into the object store as the object sha (size bytes),
// checking while copying that src still has that digest. An object already
// present with the right content is kept; one that is corrupt is replaced.
func (s *Store) putObject(src, sha string, size int64) error {
	dst := s.ObjectPath(sha)
	if got, n, err := hashFile(dst); err == nil && got == sha && n == size {
		return nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("object %s: %w", sha, err)
	}
	dir := filepath.Dir(dst)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("object %s: %w", sha, err)
		}
		if err := fileutil.SyncDir(filepath.Dir(dir)); err != nil {
			return fmt.Errorf("object %s: %w", sha, err)
		}
	}
	in, err := inroot.OpenPath(src)
	if err != nil {
		return fmt.Errorf("object %s: %w", sha, err)
	}
	defer in.Close()
	f, err := fileutil.CreateTemp(dst)
	if err != nil {
		return fmt.Errorf("object %s: %w", sha, err)
	}
	defer f.Abort()
	h := sha256.New()
	w := io.MultiWriter(f, h)
	// Copy in two halves so a test can kill the writer with half a file written.
	n1, err := io.CopyN(w, in, size/2)
	if err != nil {
		return fmt.Errorf("copy %s into the cache: %w", src, err)
	}
	at("object-partial")
	n2, err := io.Copy(w, in)
	if err != nil {
		return fmt.Errorf("copy %s into the cache: %w", src, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sha || n1+n2 != size {
		return fmt.Errorf("copy %s into the cache: file changed while adding: sha256 %s (%d bytes), want %s (%d bytes)", src, got, n1+n2, sha, size)
	}
	if err := f.Commit(0o444, true); err != nil {
		return fmt.Errorf("object %s: %w", sha, err)
	}
	return nil
}

// removeTemps deletes the temporary files interrupted writers left in the
// cache's directories, and the TempDirs of dead processes, and returns their
// paths. Call it with the lock held.
func (s *Store) removeTemps() ([]string, error) {
	var removed []string
	top, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("clean temporary files: %w", err)
	}
	for _, e := range top {
		if !isTemp(e.Name()) || !e.IsDir() {
			continue
		}
		p := filepath.Join(s.dir, e.Name())
		if ok, err := removeStaleTempDir(p); err != nil {
			return removed, err
		} else if ok {
			removed = append(removed, p)
		}
	}
	dirs := []string{setsDir, keysDir, indexDir, objectsDir}
	subs, err := os.ReadDir(filepath.Join(s.dir, objectsDir))
	if err != nil {
		return removed, fmt.Errorf("clean temporary files: %w", err)
	}
	for _, e := range subs {
		if e.IsDir() {
			dirs = append(dirs, filepath.Join(objectsDir, e.Name()))
		}
	}
	for _, d := range dirs {
		dir := filepath.Join(s.dir, d)
		ents, err := os.ReadDir(dir)
		if err != nil {
			return removed, fmt.Errorf("clean temporary files: %w", err)
		}
		n := len(removed)
		for _, e := range ents {
			if !isTemp(e.Name()) {
				continue
			}
			p := filepath.Join(dir, e.Name())
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return removed, fmt.Errorf("clean temporary files: %w", err)
			}
			removed = append(removed, p)
		}
		if len(removed) > n {
			if err := fileutil.SyncDir(dir); err != nil {
				return removed, err
			}
		}
	}
	return removed, nil
}
