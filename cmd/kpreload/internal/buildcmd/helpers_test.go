package buildcmd

import "github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"

// cli is the tree these tests run: kpreload build.
var cli = clitest.New(New)
