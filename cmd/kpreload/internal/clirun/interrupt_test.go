package clirun

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/internal/inroot/inroottest"
)

// stuckEnv, set to a FIFO's path, makes the test binary a kpreload whose
// "stuck" command blocks in open(2) on that FIFO (TestInterruptStuck).
const stuckEnv = "KPRELOAD_TEST_STUCK_FIFO"

func TestMain(m *testing.M) {
	if fifo := os.Getenv(stuckEnv); fifo != "" {
		os.Exit(Execute(func() *cobra.Command { return NewRoot(newStuckCmd) }, []string{"stuck", fifo}, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// newStuckCmd is a command that, like a pull, catches SIGINT and SIGTERM
// for its cleanups, then blocks where no context reaches: in open(2) on a
// FIFO with no writer.
func newStuckCmd() *cobra.Command {
	return &cobra.Command{
		Use:  "stuck FIFO",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := SignalContext(cmd)
			defer stop()
			fmt.Fprintln(cmd.ErrOrStderr(), "blocking")
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			f.Close()
			return ctx.Err()
		},
	}
}

// TestInterruptStuck: a kpreload command blocked in a system call ends
// within 5 s of SIGTERM (InterruptGrace), and at once on a second signal,
// with 128 + the signal as its status and a message saying it was
// interrupted.
func TestInterruptStuck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		signals []syscall.Signal
		within  time.Duration
		code    int
		message string
	}{
		{"SIGTERM", []syscall.Signal{syscall.SIGTERM}, 5 * time.Second, 143,
			"kpreload: interrupted by terminated: the command did not return within 4s of it; exiting without its cleanups"},
		{"SIGINT twice", []syscall.Signal{syscall.SIGINT, syscall.SIGINT}, 2 * time.Second, 130,
			"kpreload: interrupted by interrupt: a second signal came; exiting without its cleanups"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fifo := filepath.Join(t.TempDir(), "fifo")
			inroottest.FIFO(t, fifo)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), stuckEnv+"="+fifo)
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			r := bufio.NewReader(stderr)
			if line, err := r.ReadString('\n'); err != nil || line != "blocking\n" {
				t.Fatalf("the stuck command said %q, %v; want blocking", line, err)
			}
			var rest bytes.Buffer
			copied := make(chan struct{})
			go func() { io.Copy(&rest, r); close(copied) }()
			time.Sleep(200 * time.Millisecond) // into open(2)
			start := time.Now()
			for _, s := range tc.signals {
				if err := cmd.Process.Signal(s); err != nil {
					t.Fatal(err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			// Wait closes the pipe once the process has exited: only after
			// the copy has read the pipe to its end, or the last words can
			// be lost on a busy host.
			exited := make(chan error, 1)
			go func() { <-copied; exited <- cmd.Wait() }()
			select {
			case err = <-exited:
			case <-time.After(tc.within):
				cmd.Process.Kill()
				<-exited
				t.Fatalf("still running %s after %v", time.Since(start).Round(time.Millisecond), tc.signals)
			}
			<-copied
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != tc.code || !strings.Contains(rest.String(), tc.message) {
				t.Errorf("after %v: %v (exit %d), stderr %q; want exit %d and %q", tc.signals, err, ee.ExitCode(), rest.String(), tc.code, tc.message)
			}
		})
	}
}
