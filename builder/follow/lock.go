package follow

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kpreload/kpreload/internal/flock"
)

// ErrRunning is Cycle's error when another cycle holds the lock.
var ErrRunning = errors.New("another follow cycle is running")

// LockFile is the lock's file name in the state directory; shard I of N
// has its own, follow-I-of-N.lock (the shards of one cycle run side by side).
const LockFile = "follow.lock"

// lockName is the lock file of shard (LockFile when shard is zero).
func lockName(index, count int) string {
	if count == 0 {
		return LockFile
	}
	return fmt.Sprintf("follow-%d-of-%d.lock", index, count)
}

// lock takes the state directory's cycle lock (flock: the kernel drops it
// when its holder dies, so a cycle killed mid-push never blocks the next).
// Held by another cycle, it fails with ErrRunning naming the holder, or,
// with wait, waits for it (until ctx ends).
func lock(ctx context.Context, dir, name string, wait bool) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("follow: lock: %w", err)
	}
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("follow: lock: %w", err)
	}
	var busy func() error
	if !wait {
		busy = func() error {
			holder := make([]byte, 200)
			n, _ := f.ReadAt(holder, 0)
			return fmt.Errorf("follow: %w (%s holds %s); this one builds nothing: let it finish, or run with --wait", ErrRunning, strings.TrimSpace(string(holder[:n])), path)
		}
	}
	if err := flock.Lock(ctx, f, 200*time.Millisecond, busy); err != nil {
		f.Close()
		switch {
		case errors.Is(err, ErrRunning):
			return nil, err
		case ctx.Err() != nil:
			return nil, fmt.Errorf("follow: waiting for another cycle: %w", err)
		}
		return nil, fmt.Errorf("follow: lock %s: %w", path, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(fmt.Sprintf("pid %d since %s\n", os.Getpid(), time.Now().UTC().Format(time.RFC3339))), 0)
	return func() {
		_ = f.Truncate(0)
		f.Close()
	}, nil
}
