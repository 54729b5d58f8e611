// Package cli holds the kpreload command tree (cobra). Each subcommand lives in a
// file of its own and registers itself with register.
package cli

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
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
	}
	for _, f := range commands {
		root.AddCommand(f())
	}
	return root
}

// Execute runs the command line and returns the process exit status.
func Execute(args []string, stdout, stderr io.Writer) int {
	root := NewRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.Execute(); err != nil {
		fmt.Fprintf(stderr, "kpreload: %v\n", err)
		return 1
	}
	return 0
}

// printJSON writes v as indented JSON, the format every --json flag uses.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
