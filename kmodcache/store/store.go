// Package store keeps the module cache on disk: content-addressed module files,
// the manifests of the module sets built from them, a lookup from build cache
// keys to sets, and one boot index per kernel release for /init.
//
// Layout under the cache directory:
//
//	objects/sha256/<ab>/<hex>      module files as given (.ko, .ko.xz, .ko.zst), named by the SHA-256 of their bytes
//	sets/<id>.json                 canonical manifests; id is the SHA-256 of the file
//	keys/<key-sha256>              the id of the set built from a cache key (one line)
//	index/<kernel-release>.json    the boot index of that kernel (bootindex.Index)
//	.lock                          flock(2)ed by every writer
//
// A boot index names its module files relative to its own directory: every set
// has Dir "../objects/sha256" and each module Path "<ab>/<hex>", so /init only
// joins three strings and opens the file.
//
// Every file is written to a ".tmp-*" file in its final directory, synced and
// renamed into place, and writers go in a fixed order (objects, manifest, key,
// index), so a reader or a crash at any point never sees a half file or a
// manifest whose objects are missing. Readers ignore ".tmp-*" files; the next
// writer removes them and rewrites any index a killed writer left behind.
//
// A cache in a root filesystem (OpenIn) is kept inside that root: every file
// of it is opened, created, renamed and removed through internal/inroot,
// resolved inside the root as in a chroot, its last element never followed
// where it is written, so a link anywhere in the cache leads nothing out of
// the root. Open is OpenIn with the root "/".
package store

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/internal/flock"
	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"golang.org/x/sys/unix"
)

// Directory and file names of the layout.
const (
	objectsDir = "objects/sha256"
	setsDir    = "sets"
	keysDir    = "keys"
	indexDir   = bootindex.IndexDir
	lockName   = ".lock"
	tmpPrefix  = fileutil.TempPrefix
	// IndexSetDir is the Dir of every set in a boot index: the object
	// directory, relative to the index directory.
	IndexSetDir = "../" + objectsDir
)

// MaxRecord bounds each record of the cache as it is read: a manifest, a
// cache key's record, a boot index. Each is read as a regular file
// (inroot.ReadPath): a FIFO, a device or a directory in its place is
// refused at once, never waited on.
const MaxRecord = 16 << 20

// DefaultDir is the cache directory used when neither a flag nor
// $KPRELOAD_CACHE_DIR names one.
const DefaultDir = "/" + bootindex.RootCacheDir

// Store is a module cache directory.
type Store struct {
	root string // the tree the cache is in: "/" for a cache named on this machine
	dir  string // the cache directory in root, clean and absolute
}

// Open opens the cache at dir, creating its directories when missing. Opening
// writes nothing else: leftovers of interrupted writers are cleaned by the
// next writer (Add, Remove, Repair).
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, fmt.Errorf("open module cache: empty directory name")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("open module cache %s: %w", dir, err)
	}
	return open("/", abs)
}

// OpenIn opens the cache at dir in the tree at root (a root filesystem's
// cache), as Open does; every file of it is then read, created, renamed and
// removed resolved inside root (internal/inroot), as in a chroot of root, so
// that no link in the cache leads anything out of root.
func OpenIn(root, dir string) (*Store, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("open module cache %s: %w", inroot.Host(root, dir), err)
	}
	return open(abs, path.Clean("/"+dir))
}

func open(root, dir string) (*Store, error) {
	s := &Store{root: root, dir: dir}
	for _, d := range []string{objectsDir, setsDir, keysDir, indexDir} {
		if err := inroot.MkdirAll(root, s.name(d), 0o755); err != nil {
			return nil, fmt.Errorf("open module cache %s: %w", s.Dir(), err)
		}
	}
	return s, nil
}

// name is the name in the store's root of elem, a path in the cache directory.
func (s *Store) name(elem ...string) string {
	return path.Join(append([]string{s.dir}, elem...)...)
}

// host names a file of the store's root on this machine, for messages.
func (s *Store) host(name string) string { return inroot.Host(s.root, name) }

// Dir returns the cache directory.
func (s *Store) Dir() string { return s.host(s.dir) }

// ObjectPath returns where the object with the given SHA-256 (hex) is stored.
func (s *Store) ObjectPath(sha string) string { return s.host(s.objectName(sha)) }

// objectName is the object's name in the store's root.
func (s *Store) objectName(sha string) string { return s.name(objectsDir, objectRel(sha)) }

// OpenObject opens the object with the given SHA-256 (hex) for reading, a
// regular file resolved as every file of the cache; the caller checks its
// digest where it matters.
func (s *Store) OpenObject(sha string) (*os.File, error) {
	return inroot.Open(s.root, s.objectName(sha))
}

// objectRel is an object's path relative to the object directory: "<ab>/<hex>".
func objectRel(sha string) string {
	if len(sha) < 2 {
		return sha
	}
	return sha[:2] + "/" + sha
}

// ManifestPath returns where the manifest of set id is stored.
func (s *Store) ManifestPath(id string) string { return s.host(s.manifestName(id)) }

func (s *Store) manifestName(id string) string { return s.name(setsDir, id+".json") }

// IndexPath returns where the boot index of a kernel release is stored.
func (s *Store) IndexPath(kernel string) string { return s.host(s.indexName(kernel)) }

func (s *Store) indexName(kernel string) string { return s.name(indexDir, kernel+".json") }

// keyPath returns where the set id for a cache key digest is stored.
func (s *Store) keyPath(keyID string) string { return s.host(s.keyName(keyID)) }

func (s *Store) keyName(keyID string) string { return s.name(keysDir, keyID) }

// Records kept in the cache directory by other packages (a registry's
// remembered generations) are read, written and locked through ReadFile,
// WriteFile and LockFile, resolved as the cache's own files are; file is
// one name in the cache directory.

// ReadFile reads the regular file file of the cache directory, failing
// (inroot.ErrTooLarge) when it holds more than max bytes.
func (s *Store) ReadFile(file string, max int64) ([]byte, error) {
	if err := recordName(file); err != nil {
		return nil, err
	}
	return inroot.ReadFile(s.root, s.name(file), max)
}

// WriteFile replaces the file file of the cache directory with data,
// atomically and synced (a link there is replaced, never followed).
func (s *Store) WriteFile(file string, data []byte, perm fs.FileMode) error {
	if err := recordName(file); err != nil {
		return err
	}
	return inroot.WriteFile(s.root, s.name(file), data, perm)
}

// LockFile opens the file file of the cache directory for flock(2),
// creating it when missing; a link or anything but a regular file there is
// refused.
func (s *Store) LockFile(file string) (*os.File, error) {
	if err := recordName(file); err != nil {
		return nil, err
	}
	return inroot.OpenLock(s.root, s.name(file), true, 0o644)
}

// recordName checks that file is one name in the cache directory.
func recordName(file string) error {
	if file == "" || file == "." || file == ".." || strings.Contains(file, "/") {
		return fmt.Errorf("%q is not a file name of the cache directory", file)
	}
	return nil
}

// lockPollInterval is how often lock retries while another writer holds the lock.
const lockPollInterval = 20 * time.Millisecond

// lock takes the writer lock (flock on .lock), waiting until it is free or ctx
// ends. The kernel releases it when the holder exits, however it exits.
func (s *Store) lock(ctx context.Context) (unlock func(), err error) {
	f, err := inroot.OpenLock(s.root, s.name(lockName), true, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock module cache: %w", err)
	}
	if err := flock.Lock(ctx, f, lockPollInterval, nil); err != nil {
		f.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("lock module cache %s: another writer holds it: %w", f.Name(), err)
		}
		return nil, fmt.Errorf("lock module cache %s: %w", f.Name(), err)
	}
	return func() {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}
