// Package tiered is kpreload's two-level module cache: the local store
// (kmodcache/store) in front of an optional OCI registry of cells
// (kmodcache/remote), behind one protocol of three calls.
//
//   - Get looks for a cell's key in the local store, then in the registry; a
//     cell the registry holds is pulled (every blob verified) into the store.
//     A cell found locally that the registry lacks is pushed to it, so a run
//     after a killed push completes it. A failure the registry records under
//     the key is a final answer (a *FailedError), unless RetryFailed.
//   - Put adds a built cell's modules to the local store, then pushes the set.
//   - Fail records a compile failure in the registry, so that nobody rebuilds
//     the same key; the local record is the build log the caller keeps.
//
// Nothing the registry does makes a local entry wrong: a push or record that
// fails is reported (Entry.PushErr) and the local cache stays as it is. With
// PullOnly the registry is only read.
package tiered

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/remote"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// What happened on the registry, as Entry.Remote says it.
const (
	// RemotePulled: Get took the cell from the registry.
	RemotePulled = "pulled"
	// RemotePushed: the registry lacked the set and now holds it.
	RemotePushed = "pushed"
	// RemotePresent: the registry already held the set.
	RemotePresent = "present"
	// RemoteAbsent: neither level held the cell.
	RemoteAbsent = "absent"
	// RemoteUntrusted: the registry's copy is unsigned, signed by a key not
	// trusted or tampered with; it is never taken.
	RemoteUntrusted = "untrusted in the registry"
	// RemoteRetrying: the registry records a failure, and RetryFailed asks
	// for a build all the same.
	RemoteRetrying = "retrying a recorded failure"
	// RemoteKnownFailure: the registry records the key as failed.
	RemoteKnownFailure = "known failure"
	// RemoteRecordedFailure: Fail recorded the failure in the registry.
	RemoteRecordedFailure = "recorded failure"
	// RemotePushFailed: a push to the registry failed (Entry.PushErr says why).
	RemotePushFailed = "push failed"
)

// Options configures a Cache.
type Options struct {
	// Remote, if set, is the registry behind the local store.
	Remote *remote.Remote
	// PullOnly reads the registry and never writes it; a cell neither level
	// holds is an error naming both.
	PullOnly bool
	// RetryFailed makes a failure the registry records a miss (to be built
	// again) instead of a final answer.
	RetryFailed bool
}

// Cache is a local store with, optionally, a registry behind it; it is safe
// for concurrent use when its store and registry are.
type Cache struct {
	local *store.Store
	opts  Options
}

// New returns the cache of local, with o.Remote (if any) behind it.
func New(local *store.Store, o Options) *Cache {
	return &Cache{local: local, opts: o}
}

// Local returns the local store.
func (c *Cache) Local() *store.Store { return c.local }

// Cell is one recipe for one kernel: its key and what messages and failure
// records name.
type Cell struct {
	// Key is the cell's content key.
	Key map[string]string
	// Recipe and Kernel name the cell.
	Recipe, Kernel string
	// Driver, Version and Flavor are the set's; Put records them with it.
	Driver, Version, Flavor string
}

// String names the cell as messages do: "recipe for kernel".
func (c Cell) String() string { return c.Recipe + " for " + c.Kernel }

// Entry is what a call found or did.
type Entry struct {
	// SetID is the local set holding the cell (found, pulled or put), or ""
	// on a miss.
	SetID string
	// Pulled is true when Get took the set from the registry.
	Pulled bool
	// Remote says what happened on the registry (one of the Remote
	// constants), "" without one.
	Remote string
	// Trust is the pulled record's remote.Record.Trust ("verified",
	// "unverified" or "unsigned") when Get pulled the cell, else "".
	Trust string
	// PushErr is why a push or failure record failed; the local cache is
	// fine.
	PushErr error
}

// FailedError is Get's error for a cell the registry records as failed
// under the same key; it wraps remote.ErrFailedCell.
type FailedError struct {
	// Cell is the cell asked for.
	Cell Cell
	// FirstError is the recorded first error line of the build.
	FirstError string
	// Recorded is when the failure was recorded.
	Recorded time.Time
	// Remote names the registry.
	Remote string
}

// Error says what was recorded where, and how to build it anyway.
func (e *FailedError) Error() string {
	return fmt.Sprintf("%s: %v (recorded %s in %s; the key has not changed, so it is not rebuilt; --retry-failed rebuilds it): %s",
		e.Cell, remote.ErrFailedCell, e.Recorded.Format("2006-01-02 15:04 MST"), e.Remote, e.FirstError)
}

// Unwrap returns remote.ErrFailedCell.
func (e *FailedError) Unwrap() error { return remote.ErrFailedCell }

// Get looks for cell in the local store, then in the registry. A local hit
// the registry lacks is pushed to it (a failed push is Entry.PushErr, not an
// error). A miss on both levels is an empty Entry, or an error with
// PullOnly. A registry copy that does not verify is an error, never a miss:
// its blobs never enter the store, and building over it would not mend the
// registry's copy. The Entry's Remote is set also when err is not nil.
func (c *Cache) Get(ctx context.Context, cell Cell) (Entry, error) {
	id, ok, err := c.local.Lookup(cell.Key)
	if err != nil {
		return Entry{}, err
	}
	if ok {
		e := Entry{SetID: id}
		c.push(ctx, cell, &e)
		return e, nil
	}
	rm := c.opts.Remote
	if rm == nil {
		return Entry{}, nil
	}
	rec, err := rm.Lookup(ctx, cell.Key)
	switch {
	case errors.Is(err, remote.ErrNotFound):
		e := Entry{Remote: RemoteAbsent}
		if c.opts.PullOnly {
			return e, fmt.Errorf("%s: neither the local cache nor %s holds this cell (key %s); build it with kpreload build --remote %s", cell, rm, shortKey(cell.Key), rm)
		}
		return e, nil
	case errors.Is(err, remote.ErrUntrusted) && !c.opts.PullOnly:
		// Built here instead (and, with a signing key, pushed over it).
		return Entry{Remote: RemoteUntrusted}, nil
	case err != nil:
		return Entry{}, fmt.Errorf("%s: %w", cell, err)
	}
	if err := rm.CheckSeen(c.local, rec); err != nil {
		return Entry{}, fmt.Errorf("%s: %w", cell, err)
	}
	if rec.State == remote.StateFailed {
		if c.opts.RetryFailed && !c.opts.PullOnly {
			return Entry{Remote: RemoteRetrying}, nil
		}
		return Entry{Remote: RemoteKnownFailure}, &FailedError{Cell: cell, FirstError: rec.FirstError, Recorded: rec.Created, Remote: rm.String()}
	}
	pr, err := rm.PullRecord(ctx, c.local, rec, true)
	if err != nil {
		return Entry{}, err
	}
	return Entry{SetID: pr.SetID, Pulled: true, Remote: RemotePulled, Trust: rec.Trust}, nil
}

// Put adds a built cell to the local store (req's driver, version, flavour
// and key are the cell's), then pushes the set to the registry. Only the
// local add can make it fail; a failed push is Entry.PushErr.
func (c *Cache) Put(ctx context.Context, cell Cell, req store.AddRequest) (Entry, error) {
	req.Driver, req.Version, req.Flavor, req.CacheKey = cell.Driver, cell.Version, cell.Flavor, cell.Key
	_, id, err := c.local.AddFiles(ctx, req)
	if err != nil {
		return Entry{}, err
	}
	e := Entry{SetID: id}
	c.push(ctx, cell, &e)
	return e, nil
}

// Fail records that cell failed to compile (its first error line and the
// tail of the build log at logPath) in the registry, unless PullOnly; a
// failure never replaces a built cell there. A record that fails is
// Entry.PushErr.
func (c *Cache) Fail(ctx context.Context, cell Cell, firstError, logPath string) Entry {
	var e Entry
	if c.opts.Remote == nil || c.opts.PullOnly || cell.Key == nil {
		return e
	}
	_, err := c.opts.Remote.PushFailure(ctx, remote.Failure{
		Key: cell.Key, Recipe: cell.Recipe, Kernel: cell.Kernel,
		Driver: cell.Driver, Version: cell.Version, Flavor: cell.Flavor,
		FirstError: firstError, LogPath: logPath,
	})
	if err != nil {
		e.PushErr = fmt.Errorf("%s: %w", cell, err)
		return e
	}
	e.Remote = RemoteRecordedFailure
	return e
}

// push uploads e's set to the registry unless it holds it already.
func (c *Cache) push(ctx context.Context, cell Cell, e *Entry) {
	if c.opts.Remote == nil || c.opts.PullOnly {
		return
	}
	pr, err := c.opts.Remote.PushSet(ctx, c.local, e.SetID, cell.Recipe)
	if err != nil {
		e.Remote, e.PushErr = RemotePushFailed, fmt.Errorf("%s: %w", cell, err)
		return
	}
	e.Remote = RemotePresent
	if pr.Pushed {
		e.Remote = RemotePushed
	}
}

// shortKey abbreviates a cell key's id for messages.
func shortKey(key map[string]string) string {
	id := manifest.KeyID(key)
	if len(id) > 12 {
		id = id[:12]
	}
	return id
}
