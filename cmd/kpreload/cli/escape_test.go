package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/status"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"
	"github.com/kpreload/kpreload/gpu/cdispec"
	"github.com/kpreload/kpreload/internal/termtext"
	"github.com/kpreload/kpreload/report"
	"github.com/kpreload/kpreload/testsupport/treetest"
)

// TestStatusEscapesHostileNames: a root whose boot index names a driver
// "evil\e]0;PWNED\a\e[2J" or a version "1\r\nFAKE: line": status --root
// refuses the index (names outside the grammar), says so with the names
// escaped, and prints no raw ESC, BEL or CR and no forged line; --json stays
// JSON with the same refusal.
func TestStatusEscapesHostileNames(t *testing.T) {
	const k = "6.1.0-56-cloud-amd64"
	for _, n := range clitest.HostileNames {
		t.Run(n.Version, func(t *testing.T) {
			ix, err := json.Marshal(map[string]any{"format": 1, "kernel": k, "sets": []map[string]any{
				{"id": strings.Repeat("ab", 32), "driver": n.Driver, "version": n.Version, "dir": "../objects/sha256", "modules": []any{}},
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
			if c := clitest.RawControl(out + errOut); code != 0 || c >= 0 {
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
			if c := clitest.RawControl(out); c >= 0 {
				t.Errorf("status --json printed a raw control byte %#x", c)
			}
		})
	}
}

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

// TestStatusEscapes: the printer of status escapes what it is
// given even when a reader let a hostile name through (the escaping
// holds on its own, not only behind the name grammar).
func TestStatusEscapes(t *testing.T) {
	for _, n := range clitest.HostileNames {
		var b bytes.Buffer
		writeStatus(&b, &status.Status{Booted: true, RunningKernel: n.Version, Default: n.Version, DefaultWhy: n.Driver,
			Kernels:    []install.Kernel{{Release: n.Version, Image: true, Initramfs: true, Drivers: []string{n.Driver + " " + n.Version}, IndexError: n.Driver}},
			Driver:     &status.Driver{Driver: n.Driver, Version: n.Version, Flavor: n.Driver, By: n.Driver, Previous: n.Version, Userspace: n.Driver},
			Request:    &status.Request{Source: n.Driver, Origin: n.Version, Version: n.Version, Flavor: n.Driver, UserData: &report.UserData{Action: n.Driver, Reason: n.Version}},
			CDI:        &cdispec.Verification{File: n.Driver, Kind: n.Version, State: n.Driver, Why: n.Version},
			SecureBoot: &status.SecureBoot{State: n.Driver, Lockdown: n.Version, Keys: []status.SigningKey{{Signer: n.Driver, SigKey: n.Version, Sets: []string{n.Driver}}}},
			Problems:   []status.Problem{{What: n.Driver, Fix: n.Version}}})
		out := b.String()
		t.Logf("\n%s", out)
		if c := clitest.RawControl(out); c >= 0 || strings.Contains(out, "\nFAKE") || !strings.Contains(out, termtext.Name(n.Driver)) {
			t.Errorf("status printed %q: a raw control byte %#x, a forged line, or %q not escaped", out, c, n.Driver)
		}
	}
}
