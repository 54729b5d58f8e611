package cli

import (
	"bytes"
	"testing"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"
)

// runCLI runs the kpreload command line and returns its exit status and output.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Execute(args, &o, &e)
	return code, o.String(), e.String()
}

// helpExamples returns the example command lines of `kpreload ARGS --help`
// (clitest.CLI.HelpExamples on the whole tree).
func helpExamples(t *testing.T, args ...string) [][]string {
	t.Helper()
	return whole().HelpExamples(t, args...)
}

// whole is the whole kpreload tree, for clitest's helpers.
func whole() *clitest.CLI { return clitest.New(commands...) }

// treeCommands returns every visible command of the tree, root first.
func treeCommands() []*cobra.Command { return whole().Commands() }

// exampleLines returns the kpreload command lines of the Examples section of
// c's --help (clitest.CLI.ExampleLines).
func exampleLines(t *testing.T, c *cobra.Command) []string { return whole().ExampleLines(t, c) }

// helpOf returns c's --help.
func helpOf(t *testing.T, c *cobra.Command) string { return whole().HelpOf(t, c) }

// mustRun runs the CLI and fails unless it exits with code; it returns
// stdout and stderr.
func mustRun(t *testing.T, code int, args ...string) (stdout, stderr string) {
	t.Helper()
	return whole().MustRun(t, code, args...)
}
