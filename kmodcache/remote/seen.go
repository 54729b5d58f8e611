package remote

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/kmodcache/store"
)

// SeenFile is the file in a module cache's directory that remembers, per
// registry repository and cell identity (driver, version, flavour, kernel),
// the highest generation of a built cell signed by a trusted key that a
// pull has seen there, so that a registry serving an older signed cell, or
// hiding the newest, is refused. Removing it forgets what was seen.
const SeenFile = "remote-generations.json"

// seenLock is the file flock(2)ed while SeenFile is read and replaced.
const seenLock = "remote-generations.lock"

// seenFormat is SeenFile's format version.
const seenFormat = 1

// maxSeenFile bounds SeenFile's size.
const maxSeenFile = 16 << 20

// ErrRollback is wrapped by the errors of a pull that is offered an older
// signed cell than its cache has seen for the same identity, or finds the
// newest it has seen missing from the registry.
var ErrRollback = errors.New("rollback refused")

// Identity is what a cell is for: one driver version and flavour built for
// one kernel. A module cache holds one set per identity.
type Identity struct {
	Driver  string `json:"driver"`
	Version string `json:"version"`
	Flavor  string `json:"flavor,omitempty"`
	Kernel  string `json:"kernel"`
}

// String names the identity as messages do.
func (id Identity) String() string {
	return strings.TrimSpace(id.Driver+" "+id.Version+" "+id.Flavor) + " for " + id.Kernel
}

// Identity returns the identity of the cell rec describes.
func (rec *Record) Identity() Identity {
	return Identity{Driver: rec.Driver, Version: rec.Version, Flavor: rec.Flavor, Kernel: rec.Kernel}
}

// seenKey is what SeenFile remembers by: a repository and an identity.
type seenKey struct {
	remote string
	id     Identity
}

// seen is what SeenFile remembers of one identity in one repository.
type seen struct {
	// Remote is the repository (oci://HOST/REPO).
	Remote string `json:"remote"`
	Identity
	// Generation is the highest generation seen.
	Generation uint64 `json:"generation"`
	// Key is the key id (tag) of the cell that had it.
	Key string `json:"key"`
	// Signer is the key that signed it.
	Signer string `json:"signer"`
}

// describe names a remembered cell for messages.
func (s seen) describe() string {
	return fmt.Sprintf("generation %d (key %s, signed by %s)", s.Generation, short(s.Key), s.Signer)
}

// seenJSON is SeenFile.
type seenJSON struct {
	Format int    `json:"format"`
	Cells  []seen `json:"cells"`
}

// seenMu serialises this process's use of SeenFile; seenLock does so
// between processes.
var seenMu sync.Mutex

// loadSeen reads st's SeenFile (none: nothing seen).
func loadSeen(st *store.Store) (map[seenKey]seen, error) {
	path := filepath.Join(st.Dir(), SeenFile)
	// A regular file of a bounded size, resolved as every file of the
	// cache: a FIFO or a device in its place is refused at once.
	b, err := st.ReadFile(SeenFile, maxSeenFile)
	if errors.Is(err, fs.ErrNotExist) {
		return map[seenKey]seen{}, nil
	}
	var f seenJSON
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		err = dec.Decode(&f)
		if err == nil && f.Format != seenFormat {
			err = fmt.Errorf("format %d, want %d", f.Format, seenFormat)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("the generations this cache has seen, %s: %w (removing the file forgets them)", path, err)
	}
	m := map[seenKey]seen{}
	for _, s := range f.Cells {
		k := seenKey{s.Remote, s.Identity}
		if s.Generation > m[k].Generation {
			m[k] = s
		}
	}
	return m, nil
}

// withSeen runs fn on st's remembered generations under the lock, then
// writes them back (atomically) if fn changed them.
func withSeen(st *store.Store, fn func(m map[seenKey]seen) (changed bool, err error)) error {
	seenMu.Lock()
	defer seenMu.Unlock()
	lf, err := st.LockFile(seenLock)
	if err != nil {
		return fmt.Errorf("lock the generations this cache has seen: %w", err)
	}
	defer lf.Close()
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock the generations this cache has seen: %w", err)
	}
	defer unix.Flock(int(lf.Fd()), unix.LOCK_UN)
	m, err := loadSeen(st)
	if err != nil {
		return err
	}
	changed, err := fn(m)
	if err != nil || !changed {
		return err
	}
	f := seenJSON{Format: seenFormat, Cells: []seen{}}
	for _, s := range m {
		f.Cells = append(f.Cells, s)
	}
	slices.SortFunc(f.Cells, func(a, b seen) int {
		return strings.Compare(a.Remote+" "+a.Identity.String(), b.Remote+" "+b.Identity.String())
	})
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := st.WriteFile(SeenFile, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("remember the generations this cache has seen: %w", err)
	}
	return nil
}

// remember raises m's entry for rec's identity in r to rec's generation;
// it reports whether it did.
func (r *Remote) remember(m map[seenKey]seen, rec *Record) bool {
	k := seenKey{r.url, rec.Identity()}
	if rec.Trust != TrustVerified || rec.State != StateOK || rec.Generation <= m[k].Generation {
		return false
	}
	m[k] = seen{Remote: r.url, Identity: rec.Identity(), Generation: rec.Generation, Key: rec.Tag, Signer: rec.Signer}
	return true
}

// rollback is the error for rec, offered where generation s of the same
// identity was seen.
func (r *Remote) rollback(rec *Record, s seen) error {
	return fmt.Errorf("remote %s: %s: %w: the registry offers generation %d (key %s), older than %s, which this cache has seen: an older cell served in place of the newest, or the newest hidden",
		r.url, rec.Identity(), ErrRollback, rec.Generation, short(rec.Tag), s.describe())
}

// CheckSeen refuses rec (a record from Lookup) when st's cache remembers a
// higher generation of the same cell (the same key, the newest of its
// identity that the cache has seen): the registry serves an older copy of
// it (an older build, or the failure record a build replaced). A different
// key of the same identity is not compared: a lookup by key asks for
// exactly those build inputs. Only records verified against Options.Trust
// are checked.
func (r *Remote) CheckSeen(st *store.Store, rec *Record) error {
	if rec.Trust != TrustVerified {
		return nil
	}
	return withSeen(st, func(m map[seenKey]seen) (bool, error) {
		for _, s := range m {
			if s.Remote == r.url && s.Key == rec.Tag && s.Generation > rec.Generation {
				return false, r.rollback(rec, s)
			}
		}
		return false, nil
	})
}

// Select picks, of recs (a listing), the built cells whose identity match
// accepts (nil: every one), the newest of each identity (see Newer). With
// Options.Trust it also compares them with what st's cache has seen in
// this repository: an
// identity whose newest offered cell is older than the newest seen, or of
// which the registry offers nothing while the cache has seen one, is left
// out and reported in refused (each wraps ErrRollback and names both
// generations); the newest offered of every other identity is remembered.
// err is for the remembered generations' file.
func (r *Remote) Select(st *store.Store, recs []*Record, match func(Identity) bool) (newest []*Record, refused []error, err error) {
	best := map[Identity]*Record{}
	var order []Identity
	for _, rec := range recs {
		id := rec.Identity()
		if rec.State != StateOK || (match != nil && !match(id)) {
			continue
		}
		if b, ok := best[id]; !ok {
			order = append(order, id)
			best[id] = rec
		} else if Newer(rec, b) {
			best[id] = rec
		}
	}
	if r.trust == nil {
		for _, id := range order {
			newest = append(newest, best[id])
		}
		return newest, nil, nil
	}
	err = withSeen(st, func(m map[seenKey]seen) (bool, error) {
		changed := false
		for _, id := range order {
			rec := best[id]
			if s, ok := m[seenKey{r.url, id}]; ok && s.Generation > rec.Generation {
				refused = append(refused, r.rollback(rec, s))
				continue
			}
			if r.remember(m, rec) {
				changed = true
			}
			newest = append(newest, rec)
		}
		var hidden []seen
		for k, s := range m {
			if k.remote == r.url && best[k.id] == nil && (match == nil || match(k.id)) {
				hidden = append(hidden, s)
			}
		}
		slices.SortFunc(hidden, func(a, b seen) int { return strings.Compare(a.Identity.String(), b.Identity.String()) })
		for _, s := range hidden {
			refused = append(refused, fmt.Errorf("remote %s: %s: %w: the registry offers no built cell of it, yet this cache has seen %s: the newest hidden",
				r.url, s.Identity, ErrRollback, s.describe()))
		}
		return changed, nil
	})
	if err != nil {
		return nil, nil, err
	}
	return newest, refused, nil
}

// Newer reports whether a cell is to be taken over another of the same
// identity: the higher generation (signed, so only with Options.Trust; an
// unverified record has none), then the later creation time, then the
// greater tag, so that the choice never depends on the listing's order.
func Newer(a, b *Record) bool {
	if a.Generation != b.Generation {
		return a.Generation > b.Generation
	}
	if c := a.Created.Compare(b.Created); c != 0 {
		return c > 0
	}
	return a.Tag > b.Tag
}
