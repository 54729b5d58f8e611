package install

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// The steps Options.StallAt can name.
const (
	// StallMidInitramfs stalls while the kpreload initramfs is half
	// written to its temporary file.
	StallMidInitramfs = "initramfs"
	// StallBeforeBootloader stalls after a hook changed the initramfs and
	// before it updates the boot loader.
	StallBeforeBootloader = "bootloader"
)

// ErrInterrupted is wrapped by the error of a run that stopped because its
// context was cancelled (the kpreload command got SIGINT or SIGTERM): what it
// had not yet renamed into place it removed, and it did not finish.
var ErrInterrupted = errors.New("interrupted")

// interrupted is nil while ctx is live; once it is cancelled, an error
// wrapping ErrInterrupted and ctx's cause (the signal, when the caller
// cancelled it with one as the cause) that says what was left undone.
func interrupted(ctx context.Context, undone string) error {
	if ctx.Err() == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != ctx.Err() {
		return fmt.Errorf("%w by %w: %s; run it again", ErrInterrupted, cause, undone)
	}
	return fmt.Errorf("%w (%w): %s; run it again", ErrInterrupted, ctx.Err(), undone)
}

// stall waits, when o.StallAt names at, until ctx is cancelled (StallAt).
func (o *Options) stall(ctx context.Context, at string) {
	if o.StallAt != at {
		return
	}
	o.logf("stalling at step %q until interrupted (StallAt)", at)
	<-ctx.Done()
}

// cancelWriter passes writes to w until ctx is cancelled, then fails them,
// so that a long write (an initramfs) stops soon after a signal. stall, when
// set, runs once after the first write.
type cancelWriter struct {
	ctx   context.Context
	w     io.Writer
	stall func()
}

func (c *cancelWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := c.w.Write(p)
	if c.stall != nil && err == nil {
		c.stall()
		c.stall = nil
	}
	return n, err
}
