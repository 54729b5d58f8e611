package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"
	"github.com/kpreload/kpreload/internal/termtext"
	"github.com/kpreload/kpreload/testsupport/treetest"
)

// TestReportEscapesHostileNames: a boot report whose kernel, module names,
// reasons, selection and summary hold terminal controls is printed by
// kpreload report with each escaped: no raw control byte, no forged line.
func TestReportEscapesHostileNames(t *testing.T) {
	for _, n := range clitest.HostileNames {
		t.Run(n.Version, func(t *testing.T) {
			rep, err := json.Marshal(map[string]any{
				"format": 1, "kernel": n.Version, "init_start": 0.5,
				"modules": []map[string]any{{"name": n.Driver, "result": "refused", "reason": n.Version, "start": 1, "end": 2}},
				"selection": map[string]any{"source": n.Driver, "request": map[string]any{"version": n.Version},
					"drivers": []map[string]any{{"driver": n.Driver, "refusal": n.Version}}, "warnings": []string{n.Driver}},
				"errors": []string{n.Version},
			})
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			treetest.Write(t, dir, map[string]string{"report.json": string(rep)})
			code, out, errOut := runCLI("report", dir+"/report.json")
			t.Logf("report: exit %d\n%s%s", code, out, errOut)
			if c := clitest.RawControl(out + errOut); code != 0 || c >= 0 || strings.Contains(out, "\nFAKE") {
				t.Errorf("report: exit %d, a raw control byte %#x or a forged line in\n%q", code, c, out+errOut)
			}
			if !strings.Contains(out, termtext.Name(n.Driver)) {
				t.Errorf("report printed\n%s\nwant the module %q escaped", out, n.Driver)
			}
		})
	}
}

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
