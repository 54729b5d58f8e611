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
	"github.com/kpreload/kpreload/cmd/kpreload/internal/copyincmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/followcmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/imagecmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/initramfscmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/installcmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/k8scmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/kernelscmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/keyscmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/matchcmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/modinfocmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/plancmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/recipecmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/reportcmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/rootdiskcmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/switchcmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/userdatacmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/xorgcmd"
)

// commands are the constructors of the top-level subcommands: each command
// group is a package of cmd/kpreload/internal named for it (bootcmd is
// kpreload boot), its commands each a struct of their options built (help,
// flags), validated and run.
var commands = []func() *cobra.Command{
	bootcmd.New,
	buildcmd.New,
	cachecmd.New,
	cdicmd.New,
	copyincmd.New,
	followcmd.New,
	imagecmd.New,
	initramfscmd.New,
	installcmd.NewInstall,
	installcmd.NewKernelHook,
	installcmd.NewStatus,
	k8scmd.New,
	kernelscmd.New,
	keyscmd.New,
	matchcmd.New,
	modinfocmd.New,
	plancmd.New,
	recipecmd.New,
	reportcmd.New,
	rootdiskcmd.New,
	switchcmd.New,
	userdatacmd.New,
	xorgcmd.New,
}

// NewRoot builds the kpreload root command with every subcommand.
func NewRoot() *cobra.Command { return clirun.NewRoot(commands...) }

// withCompletion adds cobra's completion command to root (clirun.WithCompletion).
func withCompletion(root *cobra.Command) *cobra.Command { return clirun.WithCompletion(root) }

// Execute runs the command line and returns the process exit status
// (clirun.Execute).
func Execute(args []string, stdout, stderr io.Writer) int {
	return clirun.Execute(NewRoot, args, stdout, stderr)
}
