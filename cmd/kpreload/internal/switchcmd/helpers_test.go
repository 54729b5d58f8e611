package switchcmd

import (
	"testing"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// cli is the tree these tests run: kpreload switch.
var cli = clitest.New(New)

// runCLI runs the command line and returns its exit status and output.
func runCLI(args ...string) (code int, stdout, stderr string) { return cli.Run(args...) }

// planLists returns the real supported-gpus.json of nvidia-driver 535.261.03 and
// nvidia-tesla-470-driver 470.256.02, fetched by scripts/supported-gpus.sh when missing.
func planLists(t *testing.T) (l535, l470 string) {
	t.Helper()
	l535 = testenv.SupportedGPUs(t, "nvidia-driver_535.261.03-1")
	l470 = testenv.SupportedGPUs(t, "nvidia-tesla-470-driver_470.256.02-1~deb12u1")
	return l535, l470
}
