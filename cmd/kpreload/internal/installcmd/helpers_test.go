package installcmd

import "github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"

// cli is the tree these tests run: kpreload install, kernel-hook and status.
var cli = clitest.New(NewInstall, NewKernelHook, NewStatus)

// runCLI runs the command line and returns its exit status and output.
func runCLI(args ...string) (code int, stdout, stderr string) { return cli.Run(args...) }
