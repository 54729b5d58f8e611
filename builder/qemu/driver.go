package qemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
)

// DefaultBinary is the QEMU system emulator the ExecDriver runs when none is named.
const DefaultBinary = "qemu-system-x86_64"

// Driver runs the QEMU binary; tests replace it with a fake.
type Driver interface {
	// Run starts QEMU with args and waits for it to exit, returning its exit code. When
	// ctx ends first, Run kills QEMU and returns an error wrapping ctx.Err().
	Run(ctx context.Context, args []string) (exitCode int, err error)
}

// ExecDriver runs a real QEMU binary.
type ExecDriver struct {
	// Binary is the program to run; empty means DefaultBinary on $PATH.
	Binary string
}

// Run implements Driver. A non-zero exit carries the tail of QEMU's stderr in the error.
func (d ExecDriver) Run(ctx context.Context, args []string) (int, error) {
	bin := d.Binary
	if bin == "" {
		bin = DefaultBinary
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return -1, fmt.Errorf("qemu: %s not found (install qemu-system-x86: scripts/deps.sh): %w", bin, err)
	}
	var stderr tailBuffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stderr = &stderr
	cmd.Stdout = &stderr
	err = cmd.Run()
	code := -1
	if cmd.ProcessState != nil {
		code = cmd.ProcessState.ExitCode()
	}
	if ctx.Err() != nil {
		return code, fmt.Errorf("qemu killed: %w", ctx.Err())
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		msg := strings.ReplaceAll(strings.TrimSpace(stderr.String()), "\n", "; ")
		return code, fmt.Errorf("qemu %s: %s", exitErr.ProcessState, msg)
	}
	if err != nil {
		return code, fmt.Errorf("qemu: run %s: %w", path, err)
	}
	return code, nil
}

// tailBuffer keeps the last 8 KiB written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer.
func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	if over := t.buf.Len() - 8192; over > 0 {
		t.buf.Next(over)
	}
	return len(p), nil
}

// String returns what is kept.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.String()
}
