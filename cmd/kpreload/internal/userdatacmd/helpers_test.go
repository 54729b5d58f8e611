package userdatacmd

import "github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"

// cli is the tree these tests run: kpreload user-data.
var cli = clitest.New(New)
