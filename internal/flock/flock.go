// Package flock takes flock(2) locks, polling while another process holds
// them, so a wait can end with a context.
package flock

import (
	"context"
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Lock takes an exclusive flock on f, trying again every poll while another
// process holds it (an interrupted call is retried). busy, when set, is
// called the first time the lock is found held; a non-nil error from it
// ends the wait with that error. Lock returns ctx.Err() when ctx ends first,
// and flock's own error for any other failure; the caller adds its context.
func Lock(ctx context.Context, f *os.File, poll time.Duration, busy func() error) error {
	first := true
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case !errors.Is(err, unix.EWOULDBLOCK):
			return err
		}
		if first && busy != nil {
			if err := busy(); err != nil {
				return err
			}
		}
		first = false
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
