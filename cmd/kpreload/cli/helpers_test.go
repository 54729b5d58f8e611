package cli

import (
	"bytes"
	"testing"

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
	return clitest.New(commands...).HelpExamples(t, args...)
}
