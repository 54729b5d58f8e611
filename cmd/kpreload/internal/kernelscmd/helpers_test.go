package kernelscmd

import "github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"

// cli is the tree these tests run: kpreload kernels.
var cli = clitest.New(New)
