package install

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/internal/flock"
	"github.com/kpreload/kpreload/internal/inroot"
)

// HookLock is the lock file, relative to the root, that `kpreload install`
// and every kernel hook that changes the root (postinst, postrm, refresh)
// hold flock(2)ed while they build initramfs images and rewrite the boot
// loader's configuration: two of them at once (a kernel package's hook and a
// refresh from a timer) run one after the other. It lives in kpreload's state
// directory inside the root, so a hook run in a chroot of the root and one run
// from outside with --root take the same lock; the kernel drops it when its
// holder exits, however it exits.
const HookLock = "var/lib/kpreload/kernel-hook.lock"

// DefaultLockTimeout is how long refresh and install wait for HookLock when
// Options.LockTimeout is zero. The postinst and postrm hooks wait without a
// limit: they run inside a kernel package's upgrade, which must not fail
// because a refresh is slow.
const DefaultLockTimeout = 5 * time.Minute

// ErrLocked is the error (wrapped) of a hook that gave up waiting for HookLock.
var ErrLocked = errors.New("another kpreload kernel hook or install holds the lock")

// lockPoll is how often a waiting hook tries the lock again.
const lockPoll = 100 * time.Millisecond

// lock takes o.Root's HookLock, waiting while another process holds it up
// to o.LockTimeout when limited, else until it is free (or ctx's end); what
// is the one that takes it, for the lock file (the verb, the pid and the
// time it took it).
func (o *Options) lock(ctx context.Context, what string, limited bool) (unlock func(), err error) {
	f, err := openLock(o.Root)
	if err != nil {
		return nil, err
	}
	timeout := o.LockTimeout
	if timeout <= 0 {
		timeout = DefaultLockTimeout
	}
	lctx := ctx
	if limited {
		var cancel context.CancelFunc
		lctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	busy := func() error {
		if limited {
			o.logf("waiting up to %s for %s (held by %s)", timeout, f.Name(), holder(f))
		} else {
			o.logf("waiting for %s (held by %s), without a time limit", f.Name(), holder(f))
		}
		return nil
	}
	if err := flock.Lock(lctx, f, lockPoll, busy); err != nil {
		h := holder(f)
		f.Close()
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("%w: %s holds %s: %w", ErrLocked, h, f.Name(), ctx.Err())
		case lctx.Err() != nil:
			return nil, fmt.Errorf("%w: %s holds %s, waited %s; let it finish and run this again", ErrLocked, h, f.Name(), timeout)
		}
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = fmt.Fprintf(f, "%s (pid %d) since %s\n", what, os.Getpid(), time.Now().UTC().Format(time.RFC3339))
	}
	return func() {
		_ = f.Truncate(0)
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}

// openLock opens (creating it, and its directory, when missing) root's
// HookLock, resolved inside root; the lock file itself is never a link.
// A root that is read-only is locked through the existing file, read-only.
func openLock(root string) (*os.File, error) {
	if err := inroot.MkdirAll(root, path.Dir(HookLock), 0o755); err != nil && !errors.Is(err, unix.EROFS) {
		return nil, fmt.Errorf("lock: %w", err)
	}
	f, err := inroot.OpenLock(root, HookLock, true, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	return f, nil
}

// holder is what the lock file says of the process that holds it.
func holder(f *os.File) string {
	b := make([]byte, 200)
	n, _ := f.ReadAt(b, 0)
	if h := strings.TrimSpace(string(b[:n])); h != "" {
		return h
	}
	return "another process"
}
