package k8scmd

import "github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"

// cli is the tree these tests run: kpreload k8s.
var cli = clitest.New(New)
