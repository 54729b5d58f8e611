package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/status"
	"github.com/kpreload/kpreload/gpu/cdispec"
	"github.com/kpreload/kpreload/internal/termtext"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/report"
	"github.com/kpreload/kpreload/testsupport/treetest"
)

// hostileNames are driver names and versions that would drive a terminal
// printed raw: set its title and clear it, or forge a line of output.
var hostileNames = []struct{ driver, version string }{
	{"evil\x1b]0;PWNED\a\x1b[2J", "1.0"},
	{"nvidia", "1\r\nFAKE: line"},
	{"c1\u009b2J", "1"},
}

// rawControl returns the first control byte in s that a terminal acts on
// (newline and tab aside), or -1.
func rawControl(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\n' && c != '\t') || c == 0x7f {
			return int(c)
		}
	}
	if strings.ContainsRune(s, '\u009b') {
		return 0x9b
	}
	return -1
}

// TestStatusEscapesHostileNames: a root whose boot index names a driver
// "evil\e]0;PWNED\a\e[2J" or a version "1\r\nFAKE: line": status --root
// refuses the index (names outside the grammar), says so with the names
// escaped, and prints no raw ESC, BEL or CR and no forged line; --json stays
// JSON with the same refusal.
func TestStatusEscapesHostileNames(t *testing.T) {
	const k = "6.1.0-56-cloud-amd64"
	for _, n := range hostileNames {
		t.Run(n.version, func(t *testing.T) {
			ix, err := json.Marshal(map[string]any{"format": 1, "kernel": k, "sets": []map[string]any{
				{"id": strings.Repeat("ab", 32), "driver": n.driver, "version": n.version, "dir": "../objects/sha256", "modules": []any{}},
			}})
			if err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			treetest.Write(t, root, map[string]string{
				"boot/vmlinuz-" + k:                           "k",
				"boot/kpreload/initrd.img-" + k:               "i",
				"var/lib/kpreload/cache/index/" + k + ".json": string(ix),
			})
			code, out, errOut := runCLI("status", "--root", root)
			t.Logf("status --root: exit %d\n%s%s", code, out, errOut)
			if c := rawControl(out + errOut); code != 0 || c >= 0 {
				t.Errorf("status --root: exit %d, a raw control byte %#x in\n%q", code, c, out+errOut)
			}
			if strings.Contains(out, "\nFAKE") || !strings.Contains(out, "no driver cells (boot index ") || !strings.Contains(out, "not a valid name") && !strings.Contains(out, "want 1 to 64") {
				t.Errorf("status --root printed\n%s\nwant the kernel without driver cells, the index refused for its names", out)
			}
			code, out, _ = runCLI("status", "--root", root, "--json")
			var got struct {
				Kernels []struct {
					Drivers    []string `json:"drivers"`
					IndexError string   `json:"index_error"`
				} `json:"kernels"`
			}
			if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || len(got.Kernels) != 1 || len(got.Kernels[0].Drivers) != 0 || got.Kernels[0].IndexError == "" {
				t.Errorf("status --root --json: exit %d, %v: %s; want the index refused", code, err, out)
			}
			if c := rawControl(out); c >= 0 {
				t.Errorf("status --json printed a raw control byte %#x", c)
			}
		})
	}
}

// TestReportEscapesHostileNames: a boot report whose kernel, module names,
// reasons, selection and summary hold terminal controls is printed by
// kpreload report with each escaped: no raw control byte, no forged line.
func TestReportEscapesHostileNames(t *testing.T) {
	for _, n := range hostileNames {
		t.Run(n.version, func(t *testing.T) {
			rep, err := json.Marshal(map[string]any{
				"format": 1, "kernel": n.version, "init_start": 0.5,
				"modules": []map[string]any{{"name": n.driver, "result": "refused", "reason": n.version, "start": 1, "end": 2}},
				"selection": map[string]any{"source": n.driver, "request": map[string]any{"version": n.version},
					"drivers": []map[string]any{{"driver": n.driver, "refusal": n.version}}, "warnings": []string{n.driver}},
				"errors": []string{n.version},
			})
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			treetest.Write(t, dir, map[string]string{"report.json": string(rep)})
			code, out, errOut := runCLI("report", dir+"/report.json")
			t.Logf("report: exit %d\n%s%s", code, out, errOut)
			if c := rawControl(out + errOut); code != 0 || c >= 0 || strings.Contains(out, "\nFAKE") {
				t.Errorf("report: exit %d, a raw control byte %#x or a forged line in\n%q", code, c, out+errOut)
			}
			if !strings.Contains(out, termtext.Name(n.driver)) {
				t.Errorf("report printed\n%s\nwant the module %q escaped", out, n.driver)
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
	if c := rawControl(errOut); code == 0 || c >= 0 || !strings.Contains(errOut, `x\x1b]0;PWNED\a\x1b[2J\rFAKE: line`) {
		t.Errorf("keys show --cache %q: exit %d, stderr %q; want an error with the path escaped", dir, code, errOut)
	}
	code, _, errOut = runCLI("cache", "add", "--cache", "cache", "--driver", "test", "--version", "1\r\nFAKE: line", "x.ko")
	t.Logf("exit %d: %s", code, errOut)
	if c := rawControl(errOut); code == 0 || c >= 0 || strings.Contains(errOut, "\nFAKE") || !strings.Contains(errOut, `"1\r\nFAKE: line"`) {
		t.Errorf("cache add --version with a newline: exit %d, stderr %q; want the name quoted whole", code, errOut)
	}
}

// TestPrintersEscape: the printers of status and cache ls escape what they
// are given even when a reader let a hostile name through (the escaping
// holds on its own, not only behind the name grammar).
func TestPrintersEscape(t *testing.T) {
	for _, n := range hostileNames {
		var b bytes.Buffer
		writeStatus(&b, &status.Status{Booted: true, RunningKernel: n.version, Default: n.version, DefaultWhy: n.driver,
			Kernels:    []install.Kernel{{Release: n.version, Image: true, Initramfs: true, Drivers: []string{n.driver + " " + n.version}, IndexError: n.driver}},
			Driver:     &status.Driver{Driver: n.driver, Version: n.version, Flavor: n.driver, By: n.driver, Previous: n.version, Userspace: n.driver},
			Request:    &status.Request{Source: n.driver, Origin: n.version, Version: n.version, Flavor: n.driver, UserData: &report.UserData{Action: n.driver, Reason: n.version}},
			CDI:        &cdispec.Verification{File: n.driver, Kind: n.version, State: n.driver, Why: n.version},
			SecureBoot: &status.SecureBoot{State: n.driver, Lockdown: n.version, Keys: []status.SigningKey{{Signer: n.driver, SigKey: n.version, Sets: []string{n.driver}}}},
			Problems:   []status.Problem{{What: n.driver, Fix: n.version}}})
		if err := writeCacheLs(&b, []store.Entry{{ID: n.driver, Kernel: n.version, Driver: n.driver, Version: n.version, Flavor: n.driver}}); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		t.Logf("\n%s", out)
		if c := rawControl(out); c >= 0 || strings.Contains(out, "\nFAKE") || !strings.Contains(out, termtext.Name(n.driver)) {
			t.Errorf("status and cache ls printed %q: a raw control byte %#x, a forged line, or %q not escaped", out, c, n.driver)
		}
	}
}
