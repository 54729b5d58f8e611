package archive

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/internal/flock"
)

// updateLock is the file in a private configuration that Update holds
// flock(2)ed while it writes the configuration and fetches its lists, so two
// processes sharing one cache (two builds, tests sharing the machine's
// bookworm lists) never run apt-get update into one lists directory at once.
const updateLock = "update.lock"

// lockDir takes dir's update lock, waiting until it is free or ctx ends. The
// kernel drops it when its holder dies.
func lockDir(ctx context.Context, dir string) (unlock func(), err error) {
	path := filepath.Join(dir, updateLock)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	if err := flock.Lock(ctx, f, 100*time.Millisecond, nil); err != nil {
		f.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("waiting for another update of %s: %w", dir, err)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
}
