package layers

import (
	"os"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// initSizeBudget is the most bytes /init (cmd/kpreload-init, static,
// -trimpath, -s -w, as `make build` builds it less the commit stamp) may have.
//
// Why a budget: /init is the one part of the initramfs that kpreload itself
// decides (the modules are the kernel's); every boot decompresses it, unpacks
// it, maps it and runs the package initialisers of all it links, and so does
// each run as the kernel's module helper. A growth of 127 KB made no
// measurable change to the kernel's start under the boot benchmark's
// instruction clock, but what slips in with a dependency comes by the megabyte.
//
// 4,450,000 bytes: 4,317,346 on 2026-12-07 (Go 1.26) and 3% of headroom.
// Raising it needs a sentence here: what grew, by how much, and why /init
// needs it at every boot.
const initSizeBudget = 4_450_000

// TestInitSize builds /init as `make build` does and fails when it is larger
// than initSizeBudget.
func TestInitSize(t *testing.T) {
	bin := testenv.GoBuildStatic(t, t.TempDir(), "kpreload-init", "./cmd/kpreload-init")
	st, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Size(); got > initSizeBudget {
		t.Errorf("/init is %d bytes, over its budget of %d by %d: shed what it links, or raise initSizeBudget with the sentence its comment asks for", got, initSizeBudget, got-initSizeBudget)
	} else {
		t.Logf("/init is %d bytes, %d under its budget of %d", got, initSizeBudget-got, initSizeBudget)
	}
}
