package pid1

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/gpu/instance"
)

// TestBootConsoleBounded: a mebibyte of unknown keys under kpreload: in the
// seed's user-data is one short error on the console and in the report (its
// first problems and how many more), and the boot goes on with the default.
func TestBootConsoleBounded(t *testing.T) {
	f := newFixture(t, "")
	f.initSets = []testSet{edu("1.0.0"), edu("2.0.0")}
	var ud strings.Builder
	ud.WriteString("#cloud-config\nkpreload:\n")
	keys := 0
	for ; ud.Len() < instance.MaxUserData-64; keys++ {
		fmt.Fprintf(&ud, "  k%d: 1\n", keys)
	}
	f.seed(ud.String())
	o := f.boot()
	if o.written == nil {
		t.Fatalf("no report written; console:\n%.4000s", o.console)
	}
	if got, max := len(o.console), 16<<10; got > max {
		t.Errorf("the console got %d bytes, want at most %d:\n%.4000s", got, max, o.console)
	}
	more := fmt.Sprintf("and %d more problem(s)", keys-instance.MaxProblems)
	for _, want := range []string{"kpreload: error: instance request from seed ignored: NoCloud seed ", "user-data:3: kpreload.k0: unknown field", more} {
		if !strings.Contains(o.console, want) {
			t.Errorf("the console lacks %q:\n%.4000s", want, o.console)
		}
	}
	if errs := strings.Join(o.written.Errors, "\n"); len(errs) > 16<<10 || !strings.Contains(errs, more) {
		t.Errorf("the report's errors (%d bytes) lack %q:\n%.4000s", len(errs), more, errs)
	}
	if sel := o.written.Selection; sel == nil || sel.Source != instance.SourceDefault {
		t.Errorf("selection %+v, want one from the default", sel)
	}
}

// TestConsoleText: what /init prints of one warning or error is cut at
// maxConsoleMessage bytes, never inside a UTF-8 sequence, saying how much
// more the report holds.
func TestConsoleText(t *testing.T) {
	long := strings.Repeat("a", maxConsoleMessage-1) + "é" + strings.Repeat("b", 100)
	for _, tc := range []struct{ name, msg, want string }{
		{"short", "no seed", "no seed"},
		{"at the bound", strings.Repeat("a", maxConsoleMessage), strings.Repeat("a", maxConsoleMessage)},
		{"cut before a rune", long, strings.Repeat("a", maxConsoleMessage-1) + "… (102 more bytes: the whole message is in the boot report)"},
	} {
		if got := consoleText(tc.msg); got != tc.want {
			t.Errorf("%s: consoleText = %.80q…, want %.80q…", tc.name, got, tc.want)
		}
	}
}
