package bootcmd

import (
	"github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/rootdiskcmd"
)

// cli is the tree these tests run: kpreload boot, and rootdisk for the
// disks it boots.
var cli = clitest.New(New, rootdiskcmd.New)

// runCLI runs the command line and returns its exit status and output.
func runCLI(args ...string) (code int, stdout, stderr string) { return cli.Run(args...) }
