package clirun

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// InterruptGrace is how long a command may take, once SIGINT or SIGTERM has
// cancelled its context, to return through its cleanups (a pull removes
// its temporary directory). A command still running then is ended: a
// goroutine blocked in a system call never sees the context.
const InterruptGrace = 4 * time.Second

// interruptible runs run with a context that SIGINT and SIGTERM cancel and
// returns its exit status. When run has not returned InterruptGrace after
// the first signal, or a second signal comes, it writes that the command
// was interrupted to stderr and calls exit with 128 + the signal's number,
// as a shell reports a process the signal ended.
func interruptible(stderr io.Writer, exit func(int), run func(context.Context) int) int {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	var (
		mu       sync.Mutex
		returned bool
	)
	done := make(chan struct{})
	go func() {
		var first os.Signal
		var grace <-chan time.Time
		for {
			select {
			case <-done:
				return
			case s := <-sigs:
				if first != nil {
					interrupted(&mu, &returned, stderr, exit, s, "a second signal came")
					return
				}
				first = s
				cancel(signalCause(s))
				grace = time.After(InterruptGrace)
			case <-grace:
				interrupted(&mu, &returned, stderr, exit, first, fmt.Sprintf("the command did not return within %s of it", InterruptGrace))
				return
			}
		}
	}()
	code := run(ctx)
	mu.Lock()
	returned = true
	mu.Unlock()
	close(done)
	return code
}

// errSignal is the cause of a context a signal cancelled: its text is the
// signal's name (SIGTERM), and the exit status of a command that failed with
// it is 128 + the signal's number.
type errSignal struct{ sig syscall.Signal }

func (e *errSignal) Error() string { return unix.SignalName(e.sig) }

// signalCause is s as a context's cause.
func signalCause(s os.Signal) error {
	n, ok := s.(syscall.Signal)
	if !ok {
		return fmt.Errorf("signal %v", s)
	}
	return &errSignal{n}
}

// interrupted ends the process for signal s unless the command has
// returned meanwhile; the lock is held through exit so that it cannot.
func interrupted(mu *sync.Mutex, returned *bool, stderr io.Writer, exit func(int), s os.Signal, why string) {
	mu.Lock()
	defer mu.Unlock()
	if *returned {
		return
	}
	fmt.Fprintf(stderr, "kpreload: interrupted by %v: %s; exiting without its cleanups\n", s, why)
	code := 1
	if n, ok := s.(syscall.Signal); ok {
		code = 128 + int(n)
	}
	exit(code)
}
