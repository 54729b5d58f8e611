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
package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/internal/flock"
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
	dir string
}

// Open opens the cache at dir, creating its directories when missing. Opening
// writes nothing else: leftovers of interrupted writers are cleaned by the
// next writer (Add, Remove, Repair).
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, fmt.Errorf("open module cache: empty directory name")
	}
	s := &Store{dir: filepath.Clean(dir)}
	for _, d := range []string{objectsDir, setsDir, keysDir, indexDir} {
		if err := os.MkdirAll(filepath.Join(s.dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("open module cache %s: %w", dir, err)
		}
	}
	return s, nil
}

// Dir returns the cache directory.
func (s *Store) Dir() string { return s.dir }

// ObjectPath returns where the object with the given SHA-256 (hex) is stored.
func (s *Store) ObjectPath(sha string) string {
	return filepath.Join(s.dir, objectsDir, objectRel(sha))
}

// objectRel is an object's path relative to the object directory: "<ab>/<hex>".
func objectRel(sha string) string {
	if len(sha) < 2 {
		return sha
	}
	return sha[:2] + "/" + sha
}

// ManifestPath returns where the manifest of set id is stored.
func (s *Store) ManifestPath(id string) string {
	return filepath.Join(s.dir, setsDir, id+".json")
}

// IndexPath returns where the boot index of a kernel release is stored.
func (s *Store) IndexPath(kernel string) string {
	return bootindex.Path(s.dir, kernel)
}

// keyPath returns where the set id for a cache key digest is stored.
func (s *Store) keyPath(keyID string) string {
	return filepath.Join(s.dir, keysDir, keyID)
}

// lockPollInterval is how often lock retries while another writer holds the lock.
const lockPollInterval = 20 * time.Millisecond

// lock takes the writer lock (flock on .lock), waiting until it is free or ctx
// ends. The kernel releases it when the holder exits, however it exits.
func (s *Store) lock(ctx context.Context) (unlock func(), err error) {
	path := filepath.Join(s.dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock module cache: %w", err)
	}
	if err := flock.Lock(ctx, f, lockPollInterval, nil); err != nil {
		f.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("lock module cache %s: another writer holds it: %w", path, err)
		}
		return nil, fmt.Errorf("lock module cache %s: %w", path, err)
	}
	return func() {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}
