package cachecmd

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"
	"github.com/kpreload/kpreload/internal/termtext"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// TestCacheLsEscapes: the printer of cache ls escapes what it is given
// even when a reader let a hostile name through (the escaping holds on its
// own, not only behind the name grammar).
func TestCacheLsEscapes(t *testing.T) {
	for _, n := range clitest.HostileNames {
		var b bytes.Buffer
		if err := writeCacheLs(&b, []store.Entry{{ID: n.Driver, Kernel: n.Version, Driver: n.Driver, Version: n.Version, Flavor: n.Driver}}); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		t.Logf("\n%s", out)
		if c := clitest.RawControl(out); c >= 0 || strings.Contains(out, "\nFAKE") || !strings.Contains(out, termtext.Name(n.Driver)) {
			t.Errorf("cache ls printed %q: a raw control byte %#x, a forged line, or %q not escaped", out, c, n.Driver)
		}
	}
}
