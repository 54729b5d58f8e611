// Package cli assembles the kpreload command tree (cobra) from the command
// groups, one package each under cmd/kpreload/internal, and runs it
// (internal/clirun).
package cli

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/bootcmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/buildcmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cachecmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cdicmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/clirun"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/imagecmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/installcmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/keyscmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/plancmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/reportcmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/rootdiskcmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/switchcmd"
)

// commands are the constructors of the top-level subcommands, one group
// package each.
var commands = []func() *cobra.Command{
	installcmd.NewInstall,
	installcmd.NewKernelHook,
	installcmd.NewStatus,
	keyscmd.New,
	switchcmd.New,
	cdicmd.New,
	plancmd.New,
	buildcmd.New,
	cachecmd.New,
	imagecmd.New,
	reportcmd.New,
	bootcmd.New,
	rootdiskcmd.New,
}

// register adds a subcommand constructor; called from each command file's init.
func register(f func() *cobra.Command) { commands = append(commands, f) }

// NewRoot builds the kpreload root command with every subcommand.
func NewRoot() *cobra.Command { return clirun.NewRoot(commands...) }

// withCompletion adds cobra's completion command to root (clirun.WithCompletion).
func withCompletion(root *cobra.Command) *cobra.Command { return clirun.WithCompletion(root) }

// Execute runs the command line and returns the process exit status
// (clirun.Execute).
func Execute(args []string, stdout, stderr io.Writer) int {
	return clirun.Execute(NewRoot, args, stdout, stderr)
}
