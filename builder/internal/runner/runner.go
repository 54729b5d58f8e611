// Package runner runs the builder's external programs (mmdebstrap, dpkg,
// sfdisk, mkfs, grub, qemu-img, dkms ...): the one place that stops a program
// when its context is done and quotes the end of its output in its error.
// The builder's packages reach their tools through small interfaces over a
// Runner, so their unit tests put a fake in its place.
package runner

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
	"time"

	"github.com/kpreload/kpreload/internal/tail"
)

// TailLines is how many lines of a failed program's output its error quotes.
const TailLines = 15

// tailBytes bounds the output kept for an error.
const tailBytes = 16 << 10

// Cmd is one program to run.
type Cmd struct {
	// Name is the program (looked up in $PATH unless it holds a slash).
	Name string
	// Args are its arguments.
	Args []string
	// Env is added to the environment the program inherits.
	Env []string
	// OnlyEnv makes Env the program's whole environment: it inherits none.
	OnlyEnv bool
	// Dir is its working directory ("": the current one).
	Dir string
	// Stdin is its standard input (nil: none).
	Stdin io.Reader
	// Log, when set, is given the program's output (standard output and
	// error) as it is written.
	Log io.Writer
	// Combined makes Run return the program's standard error too,
	// interleaved with its standard output as written.
	Combined bool
}

// String is the command line, for messages.
func (c Cmd) String() string {
	return strings.Join(append([]string{c.Name}, c.Args...), " ")
}

// Runner runs programs.
type Runner interface {
	// Run runs c to its end and returns its standard output (with its
	// standard error when c.Combined is set), also when it fails. When ctx
	// is done first the program is killed and the error wraps ctx's; when
	// the program fails the error is an *Error.
	Run(ctx context.Context, c Cmd) ([]byte, error)
	// LookPath finds a program as Run would, or fails.
	LookPath(name string) (string, error)
}

// Error is a program that failed: its command line, how it ended and the end
// of what it wrote (standard output and error together).
type Error struct {
	// Cmd is the program that ran.
	Cmd Cmd
	// Err is how it ended (an *exec.ExitError, or why it did not start).
	Err error
	// Tail is the end of its output, at most TailLines lines.
	Tail []string
}

// Error implements error.
func (e *Error) Error() string {
	msg := fmt.Sprintf("%s: %v", e.Cmd, e.Err)
	switch len(e.Tail) {
	case 0:
		return msg
	case 1:
		return msg + ": " + strings.TrimSpace(e.Tail[0])
	}
	return msg + "; last lines:\n  " + strings.Join(e.Tail, "\n  ")
}

// Unwrap returns how the program ended.
func (e *Error) Unwrap() error { return e.Err }

// WaitDelay is how long Run waits for a killed program's output pipes to
// close before it returns all the same.
const WaitDelay = 10 * time.Second

// Exec runs the real programs.
type Exec struct{}

// Run implements Runner.
func (Exec) Run(ctx context.Context, c Cmd) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.Name, c.Args...)
	switch {
	case c.OnlyEnv:
		cmd.Env = append([]string{}, c.Env...) // non-nil: nothing inherited
	case c.Env != nil:
		cmd.Env = append(cmd.Environ(), c.Env...)
	}
	cmd.Dir, cmd.Stdin = c.Dir, c.Stdin
	// The program runs in its own process group, and a cancelled context
	// kills the whole group: apt's methods, make's compilers and
	// mmdebstrap's helpers too, which would otherwise hold the output pipe
	// open and keep Run waiting. WaitDelay bounds the wait for the pipes.
	// Whatever of the group outlives the program (a background job of a
	// script that failed) is killed when it ends too: nothing a program
	// started runs on after Run returns.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = WaitDelay
	var stdout bytes.Buffer
	log := &tailBuffer{log: c.Log}
	cmd.Stdout, cmd.Stderr = io.MultiWriter(&stdout, log), log
	if c.Combined {
		cmd.Stderr = cmd.Stdout // the same writer: one goroutine writes at a time
	}
	err := cmd.Start()
	if err == nil {
		// Wait for the program to end without reaping it: while it is a
		// zombie its pid, the group's id, cannot be reused, so the kill
		// reaches its own group only.
		var info unix.Siginfo
		for {
			if werr := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); werr != unix.EINTR {
				break
			}
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // ESRCH when none is left
		err = cmd.Wait()
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("%s: %w", c.Name, cerr)
		}
		return stdout.Bytes(), &Error{Cmd: c, Err: err, Tail: tail.Lines(log.String(), TailLines)}
	}
	return stdout.Bytes(), nil
}

// LookPath implements Runner.
func (Exec) LookPath(name string) (string, error) { return exec.LookPath(name) }

// tailBuffer keeps the last tailBytes written to it and passes everything on
// to log, if set; standard output and error may write at once.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	log io.Writer
}

// Write implements io.Writer.
func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - tailBytes; over > 0 {
		t.buf = t.buf[over:]
	}
	if t.log != nil {
		t.log.Write(p) // a log that fails loses lines, not the program
	}
	return len(p), nil
}

// String returns what is kept.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// Default is the Runner the builder uses unless told otherwise.
var Default Runner = Exec{}

// Or returns r, or Default when r is nil.
func Or(r Runner) Runner {
	if r == nil {
		return Default
	}
	return r
}
