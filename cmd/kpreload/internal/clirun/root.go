// Package clirun assembles and runs the kpreload command tree: the root
// command over the subcommands the cli package lists, the answers to
// mistakes on every command (internal/mistakes), the root check of commands
// that change the system, the Examples of the commands cobra makes, the
// handling of SIGINT and SIGTERM, and the process's exit status.
package clirun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/mistakes"
	"github.com/kpreload/kpreload/internal/termtext"
	"github.com/kpreload/kpreload/internal/version"
)

// NewRoot builds the kpreload root command with the subcommands the
// constructors make, in that order.
func NewRoot(commands ...func() *cobra.Command) *cobra.Command {
	root := &cobra.Command{
		Use:   "kpreload",
		Short: "GPU drivers ready the moment the kernel is",
		Long: `kpreload precompiles kernel drivers with DKMS at image-build time into a
content-addressed module cache, builds an initramfs whose /init matches the
hardware present to cached modules and loads them before userspace starts, and
boots such images in QEMU to prove it.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Version(),
	}
	// --version prints the version, the commit and the Go toolchain, as
	// `kpreload version 0.2.0 (commit …, go1.26.8)`-style tools do.
	root.SetVersionTemplate(version.Get().String() + "\n")
	for _, f := range commands {
		root.AddCommand(f())
	}
	mistakes.Guard(root)
	addExamples(root)
	root.PersistentPreRunE = checkPrivilege
	return root
}

// WithCompletion adds cobra's completion command to root, once root's output
// is set (the command keeps the writer it finds), and gives it the same
// answers to mistakes and its Examples.
func WithCompletion(root *cobra.Command) *cobra.Command {
	root.InitDefaultCompletionCmd()
	mistakes.Guard(root)
	addExamples(root)
	return root
}

// Execute runs the command line on the tree newRoot builds and returns the
// process exit status. SIGINT and SIGTERM cancel the command's context; a
// command that has not returned InterruptGrace later ends the process (see
// interruptible).
func Execute(newRoot func() *cobra.Command, args []string, stdout, stderr io.Writer) int {
	return interruptible(stderr, os.Exit, func(ctx context.Context) int {
		root := newRoot()
		root.SetArgs(args)
		root.SetOut(stdout)
		root.SetErr(stderr)
		WithCompletion(root)
		if err := root.ExecuteContext(ctx); err != nil {
			if s, ok := err.(*exitStatus); ok && s.err == nil {
				return s.code
			}
			// Errors quote what they were given (names, paths, a
			// file's content): control characters shown escaped, never
			// acted on by the terminal. Their own line breaks stay
			// (joined errors, cobra's suggestions); names in them are
			// quoted whole (kmodcache/names), newlines included.
			fmt.Fprintf(stderr, "kpreload: %s\n", termtext.Text(err.Error()))
			return exitCode(err)
		}
		return 0
	})
}

// ExitCellsFailed is the exit status of a build whose only problem is cells
// that failed to compile (recorded in the remote cache when there is one):
// deterministic for the same inputs, so a batch engine need not retry it
// (deploy/k8s/matrix-job.yaml's podFailurePolicy). An error a signal caused
// (SIGTERM cancelled the command) is 128 + the signal. Every other error is 1.
const ExitCellsFailed = 3

func exitCode(err error) int {
	if s, ok := err.(*exitStatus); ok {
		return s.code
	}
	if s := (*errSignal)(nil); errors.As(err, &s) {
		return 128 + int(s.sig) // as a shell reports a process the signal ended
	}
	if errors.Is(err, matrix.ErrCellsFailed) && !errors.Is(err, matrix.ErrPushFailed) && !errors.Is(err, context.Canceled) {
		return ExitCellsFailed
	}
	return 1
}

// Exit is an error that sets the process's exit status to code; with a nil
// err it prints nothing, else err's message.
func Exit(code int, err error) error { return &exitStatus{code: code, err: err} }

// exitStatus is an error that sets the process's exit status; with no err
// it prints nothing.
type exitStatus struct {
	code int
	err  error
}

func (e *exitStatus) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitStatus) Unwrap() error { return e.err }
