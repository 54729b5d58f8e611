package xorgcmd

import "github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"

// cli is the tree these tests run: kpreload xorg.
var cli = clitest.New(New)
