package archive

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// Refresh makes every private configuration under cache read its package
// lists afresh at its next use, as if they were a day old: what a command
// that follows the archives needs to see an upload at once. Every suite's
// configuration is refreshed, bookworm's included; the host's own apt lists
// are left to the host. A configuration that is a symbolic link to another
// cache's (cache/apt/<suite> -> …, as tests share the machine's bookworm
// lists) is left to that cache: its lists keep their own 24 hour rule. It
// holds each configuration's update lock while it removes the stamp, so an
// Update under way cannot then stamp lists it fetched before (waiting for
// it, or until ctx ends).
func Refresh(ctx context.Context, cache string) error {
	dirs, err := filepath.Glob(filepath.Join(cache, "apt", "*"))
	if err != nil {
		return fmt.Errorf("refresh package lists: %w", err)
	}
	for _, d := range dirs {
		if fi, err := os.Lstat(d); err != nil || !fi.IsDir() {
			continue // a link to another cache's configuration, or gone
		}
		unlock, err := lockDir(ctx, d)
		if err != nil {
			return fmt.Errorf("refresh package lists: %w", err)
		}
		err = os.Remove(filepath.Join(d, "updated"))
		unlock()
		if err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("refresh package lists: %w", err)
		}
	}
	return nil
}
