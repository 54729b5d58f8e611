package matrix

import (
	"context"
	"errors"
	"fmt"

	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/remote"
)

// pull asks Options.Remote for a cell the local cache lacks. done is true
// when the result is final: pulled (StatePulled), or a failure the registry
// records for this key (StateFailed, unless RetryFailed). With PullOnly a
// cell the registry lacks is an error. A damaged artifact is an error: its
// blobs never enter the local cache, and building over it would not mend
// the registry's copy.
func (r *runner) pull(ctx context.Context, res *Result) (done bool, err error) {
	rm := r.opts.Remote
	rec, err := rm.Lookup(ctx, res.Key)
	switch {
	case errors.Is(err, remote.ErrNotFound):
		res.Remote = "absent"
		if r.opts.PullOnly {
			return true, fmt.Errorf("%s for %s: neither the local cache nor %s holds this cell (key %s); build it with kpreload build --remote %s", res.Recipe.Name, res.Kernel, rm, shortKey(res.Key), rm)
		}
		return false, nil
	case errors.Is(err, remote.ErrUntrusted) && !r.opts.PullOnly:
		// Unsigned, signed by a key not trusted, or tampered with: never
		// taken; built here instead (and, with a signing key, pushed over it).
		res.Remote = "untrusted in the registry"
		return false, nil
	case err != nil:
		return true, fmt.Errorf("%s for %s: %w", res.Recipe.Name, res.Kernel, err)
	}
	if rec.State == remote.StateFailed {
		if r.opts.RetryFailed && !r.opts.PullOnly {
			res.Remote = "retrying a recorded failure"
			return false, nil
		}
		res.State, res.Remote = StateFailed, "known failure"
		res.FirstError = rec.FirstError
		res.Err = fmt.Errorf("%s for %s: %w (recorded %s in %s; the key has not changed, so it is not rebuilt; --retry-failed rebuilds it): %s",
			res.Recipe.Name, res.Kernel, remote.ErrFailedCell, rec.Created.Format("2006-01-02 15:04 MST"), rm, rec.FirstError)
		return true, nil
	}
	pr, err := rm.PullRecord(ctx, r.store, rec, true)
	if err != nil {
		return true, err
	}
	res.State, res.SetID, res.Remote = StatePulled, pr.SetID, "pulled"
	return true, nil
}

// push uploads a built or cached cell to Options.Remote unless it holds it;
// a failure is kept in res.PushErr (the cell itself is fine locally).
func (r *runner) push(ctx context.Context, res *Result) {
	if r.opts.Remote == nil || r.opts.PullOnly {
		return
	}
	pr, err := r.opts.Remote.PushSet(ctx, r.store, res.SetID, res.Recipe.Name)
	if err != nil {
		res.Remote, res.PushErr = "push failed", fmt.Errorf("%s for %s: %w", res.Recipe.Name, res.Kernel, err)
		return
	}
	res.Remote = "present"
	if pr.Pushed {
		res.Remote = "pushed"
	}
}

// recordFailure records a compile failure in Options.Remote.
func (r *runner) recordFailure(ctx context.Context, res *Result) {
	if r.opts.Remote == nil || r.opts.PullOnly || res.Key == nil {
		return
	}
	rc := res.Recipe
	_, err := r.opts.Remote.PushFailure(ctx, remote.Failure{
		Key: res.Key, Recipe: rc.Name, Kernel: res.Kernel,
		Driver: rc.Driver.Name, Version: rc.Driver.Version, Flavor: rc.Flavor,
		FirstError: res.FirstError, LogPath: res.LogPath,
	})
	if err != nil {
		res.PushErr = fmt.Errorf("%s for %s: %w", rc.Name, res.Kernel, err)
		return
	}
	res.Remote = "recorded failure"
}

// shortKey abbreviates a cell key's id for messages.
func shortKey(key map[string]string) string {
	id := manifest.KeyID(key)
	if len(id) > 12 {
		id = id[:12]
	}
	return id
}
