package cli

import (
	"strings"
	"testing"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"
)

// TestErrorsEscaped: an error that quotes what it was given (here a --cache
// path with terminal controls in it) is printed with the controls escaped:
// the carriage return cannot take the line back to overwrite "kpreload:",
// ESC and BEL reach no terminal; a name in an error is quoted whole, its
// newline included.
func TestErrorsEscaped(t *testing.T) {
	t.Chdir(t.TempDir())
	dir := "x\x1b]0;PWNED\a\x1b[2J\rFAKE: line"
	code, out, errOut := runCLI("keys", "show", "--cache", dir)
	t.Logf("exit %d: %s%s", code, out, errOut)
	if c := clitest.RawControl(errOut); code == 0 || c >= 0 || !strings.Contains(errOut, `x\x1b]0;PWNED\a\x1b[2J\rFAKE: line`) {
		t.Errorf("keys show --cache %q: exit %d, stderr %q; want an error with the path escaped", dir, code, errOut)
	}
	code, _, errOut = runCLI("cache", "add", "--cache", "cache", "--driver", "test", "--version", "1\r\nFAKE: line", "x.ko")
	t.Logf("exit %d: %s", code, errOut)
	if c := clitest.RawControl(errOut); code == 0 || c >= 0 || strings.Contains(errOut, "\nFAKE") || !strings.Contains(errOut, `"1\r\nFAKE: line"`) {
		t.Errorf("cache add --version with a newline: exit %d, stderr %q; want the name quoted whole", code, errOut)
	}
}
