// Package cli holds the kpreload command tree (cobra). Each subcommand lives in a
// file of its own and registers itself with register.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/internal/termtext"
	"github.com/kpreload/kpreload/internal/version"
)

// commands collects the constructors of the top-level subcommands.
var commands []func() *cobra.Command

// register adds a subcommand constructor; called from each command file's init.
func register(f func() *cobra.Command) { commands = append(commands, f) }

// NewRoot builds the kpreload root command with every registered subcommand.
func NewRoot() *cobra.Command {
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
	guardTree(root)
	addExamples(root)
	root.PersistentPreRunE = checkPrivilege
	return root
}

// withCompletion adds cobra's completion command to root, once root's output
// is set (the command keeps the writer it finds), and gives it the same
// answers to mistakes and its Examples.
func withCompletion(root *cobra.Command) *cobra.Command {
	root.InitDefaultCompletionCmd()
	guardTree(root)
	addExamples(root)
	return root
}

// Execute runs the command line and returns the process exit status. SIGINT
// and SIGTERM cancel the command's context; a command that has not returned
// InterruptGrace later ends the process (see interruptible).
func Execute(args []string, stdout, stderr io.Writer) int {
	return interruptible(stderr, os.Exit, func(ctx context.Context) int {
		root := NewRoot()
		root.SetArgs(args)
		root.SetOut(stdout)
		root.SetErr(stderr)
		withCompletion(root)
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

// printJSON writes v as indented JSON, the format every --json flag uses.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
