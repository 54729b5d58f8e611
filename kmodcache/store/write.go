package store

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/kmodcache/fsverity"
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

// writeAtomic stores data as name (in the store's root): a temporary file
// in its directory, synced, renamed into place, then the directory synced.
// stage names the test hook called between the write and the rename
// (stage+"-temp").
func (s *Store) writeAtomic(name string, data []byte, perm os.FileMode, stage string) error {
	f, err := inroot.CreateTemp(s.root, name)
	if err != nil {
		return fmt.Errorf("write %s: %w", s.host(name), err)
	}
	defer f.Abort()
	if _, err := f.Write(data); err != nil {
		return err // names the temporary file
	}
	at(stage + "-temp")
	if err := f.Commit(perm); err != nil {
		return fmt.Errorf("write %s: %w", s.host(name), err)
	}
	return nil
}

// hashFile returns the hex SHA-256 and size of a file named on this machine.
func hashFile(path string) (string, int64, error) {
	f, err := inroot.OpenPath(path)
	if err != nil {
		return "", 0, fmt.Errorf("hash: %w", err)
	}
	return hashOpen(f)
}

// hashOpen returns the hex SHA-256 and size of what f holds, and closes it.
func hashOpen(f *os.File) (string, int64, error) {
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("hash %s: %w", f.Name(), err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// digestFile returns the hex SHA-256, the fs-verity digest and the size of
// a file named on this machine, read once.
func digestFile(path string) (sha, verity string, size int64, err error) {
	f, err := inroot.OpenPath(path)
	if err != nil {
		return "", "", 0, fmt.Errorf("hash: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	var v fsverity.Hash
	n, err := io.Copy(io.MultiWriter(h, &v), f)
	if err != nil {
		return "", "", 0, fmt.Errorf("hash %s: %w", f.Name(), err)
	}
	return hex.EncodeToString(h.Sum(nil)), v.Sum(), n, nil
}

// hashObject is hashFile for the object sha of the store.
func (s *Store) hashObject(sha string) (string, int64, error) {
	f, err := s.OpenObject(sha)
	if err != nil {
		return "", 0, fmt.Errorf("hash: %w", err)
	}
	return hashOpen(f)
}

// openSource opens a file given to Add: one in the store's root (a download
// in a TempDir) is resolved inside the root, as the cache's own files are;
// one elsewhere (a build's output) as it is named on this machine.
func (s *Store) openSource(p string) (*os.File, error) {
	if s.root != "/" {
		if abs, err := filepath.Abs(p); err == nil {
			if rel, err := filepath.Rel(s.root, abs); err == nil && filepath.IsLocal(rel) {
				return inroot.Open(s.root, rel)
			}
		}
	}
	return inroot.OpenPath(p)
}

// putObject copies the source src (opened by open) into the object store as
// the object sha (size bytes), checking while copying that src still has
// that digest. An object already present with the right content is kept;
// one that is corrupt is replaced.
func (s *Store) putObject(open func(string) (*os.File, error), src, sha string, size int64) error {
	if got, n, err := s.hashObject(sha); err == nil && got == sha && n == size {
		return nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("object %s: %w", sha, err)
	}
	dst := s.objectName(sha)
	dir := path.Dir(dst)
	if _, err := inroot.Lstat(s.root, dir); errors.Is(err, fs.ErrNotExist) {
		if err := inroot.Mkdir(s.root, dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("object %s: %w", sha, err)
		}
		if err := inroot.SyncDir(s.root, path.Dir(dir)); err != nil {
			return fmt.Errorf("object %s: %w", sha, err)
		}
	}
	in, err := open(src)
	if err != nil {
		return fmt.Errorf("object %s: %w", sha, err)
	}
	defer in.Close()
	f, err := inroot.CreateTemp(s.root, dst)
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
	if err := f.Commit(0o444); err != nil {
		return fmt.Errorf("object %s: %w", sha, err)
	}
	return nil
}

// removeTemps deletes the temporary files interrupted writers left in the
// cache's directories, and the TempDirs of dead processes, and returns their
// paths. Call it with the lock held.
func (s *Store) removeTemps() ([]string, error) {
	var removed []string
	top, err := inroot.ReadDir(s.root, s.dir)
	if err != nil {
		return nil, fmt.Errorf("clean temporary files: %w", err)
	}
	for _, e := range top {
		if !isTemp(e.Name()) || !e.IsDir() {
			continue
		}
		name := s.name(e.Name())
		if ok, err := s.removeStaleTempDir(name); err != nil {
			return removed, err
		} else if ok {
			removed = append(removed, s.host(name))
		}
	}
	dirs := []string{setsDir, keysDir, indexDir, objectsDir}
	subs, err := inroot.ReadDir(s.root, s.name(objectsDir))
	if err != nil {
		return removed, fmt.Errorf("clean temporary files: %w", err)
	}
	for _, e := range subs {
		if e.IsDir() {
			dirs = append(dirs, path.Join(objectsDir, e.Name()))
		}
	}
	for _, d := range dirs {
		dir := s.name(d)
		ents, err := inroot.ReadDir(s.root, dir)
		if err != nil {
			return removed, fmt.Errorf("clean temporary files: %w", err)
		}
		n := len(removed)
		for _, e := range ents {
			if !isTemp(e.Name()) {
				continue
			}
			p := path.Join(dir, e.Name())
			if err := inroot.Remove(s.root, p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return removed, fmt.Errorf("clean temporary files: %w", err)
			}
			removed = append(removed, s.host(p))
		}
		if len(removed) > n {
			if err := inroot.SyncDir(s.root, dir); err != nil {
				return removed, err
			}
		}
	}
	return removed, nil
}
