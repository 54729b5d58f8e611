package copyincmd

import "github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"

// cli is the tree these tests run: kpreload copy-in.
var cli = clitest.New(New)

// runCLI runs the command line and returns its exit status and output.
func runCLI(args ...string) (code int, stdout, stderr string) { return cli.Run(args...) }
