package plancmd

import "github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"

// cli is the tree these tests run: kpreload plan.
var cli = clitest.New(New)
