package installcmd

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
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

const statusKernel = "6.1.0-56-cloud-amd64"

// statusRoot writes a root with statusKernel, its kpreload initramfs and
// the test driver's 1.0.0 cells (open); booted adds what a machine that
// booted through kpreload's /init holds: the report (a fw_cfg request for
// 1.0.0), the ready record, the module in /sys, UEFI without Secure Boot,
// and no CDI spec.
func statusRoot(t *testing.T, root string, booted bool) {
	t.Helper()
	set := strings.Repeat("1a", 32)
	ix, err := json.Marshal(map[string]any{"format": 1, "kernel": statusKernel, "sets": []map[string]any{
		{"id": set, "driver": "kpreload-edu", "version": "1.0.0", "flavor": "open", "dir": "../objects/sha256", "modules": []any{}}}})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"boot/vmlinuz-" + statusKernel: "k", "boot/kpreload/initrd.img-" + statusKernel: "i",
		"lib/modules/" + statusKernel + "/modules.dep":           "",
		"var/lib/kpreload/cache/index/" + statusKernel + ".json": string(ix),
	}
	if booted {
		rep, err := json.Marshal(report.Report{Format: 1, Kernel: statusKernel, Selection: &report.Selection{
			Source: "fw_cfg", Origin: "fw_cfg opt/kpreload/instance.yaml (I/O ports)", Request: report.SelectionRequest{Version: "1.0.0", Flavor: "auto"}}})
		if err != nil {
			t.Fatal(err)
		}
		files["run/kpreload/report.json"] = string(rep)
		files["run/kpreload/ready"] = `{"format":1,"driver":"kpreload-edu","version":"1.0.0","flavor":"open","set":"` + set + `","time":4.2,"modules":["kpreload_edu"],"by":"init"}`
		files["sys/module/kpreload_edu/initstate"] = "live\n"
		files["sys/firmware/efi/fw_platform_size"] = "64\n"
		files["sys/kernel/boot_params/data"] = strings.Repeat("\x00", 0x1ec) + "\x02"
		files["sys/kernel/security/lockdown"] = "[none] integrity confidentiality\n"
		files["proc/cmdline"] = "root=/dev/vda2 ro\n"
	}
	treetest.Write(t, root, files)
}

// TestStatusHelpExamples runs status's examples exactly as written: the
// image root's in a directory holding ./image-root, the running system's
// on this host, which says what it is: a kpreload machine, or an error that
// kpreload is not installed here and what to run.
func TestStatusHelpExamples(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	statusRoot(t, filepath.Join(dir, "image-root"), false)
	code, help, _ := runCLI("status", "--help")
	_, ex, ok := strings.Cut(help, "Examples:\n")
	if code != 0 || !ok {
		t.Fatalf("status --help: exit %d, no Examples:\n%s", code, help)
	}
	ex, _, _ = strings.Cut(ex, "\n\n")
	_, report := os.Stat(report.Path)
	hostIsKpreload := install.Installed("/") || report == nil
	var ran []string
	for _, line := range strings.Split(strings.TrimSpace(ex), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "kpreload" || f[1] != "status" {
			t.Fatalf("example %q is not a kpreload status command", line)
		}
		ran = append(ran, strings.Join(f, " "))
		code, out, errOut := runCLI(f[1:]...)
		t.Logf("%s: exit %d\n%s%s", line, code, out, errOut)
		switch {
		case strings.Contains(line, "--root ./image-root"):
			for _, want := range []string{
				"default: " + statusKernel + " (the newest kernel with its driver cells)\n",
				"* " + statusKernel + ": kpreload-edu 1.0.0 (open)\n",
				"problems: none\n",
			} {
				if code != 0 || !strings.Contains(out, want) || strings.Contains(out, "booted:") {
					t.Errorf("%s: exit %d, printed\n%s\nwant %q and no booted machine's lines", line, code, out, want)
				}
			}
		case hostIsKpreload:
			if code != 0 || !strings.Contains(out, "default: ") && !strings.Contains(out, `"default"`) {
				t.Errorf("%s on this kpreload host: exit %d\n%s%s\nwant its status", line, code, out, errOut)
			}
		default:
			if code == 0 || out != "" || !strings.Contains(errOut, "kpreload is not installed on this system (no /boot/kpreload)") || !strings.Contains(errOut, "`kpreload install`") {
				t.Errorf("%s on a host without kpreload: exit %d\nstdout %q\nstderr %s\nwant an error saying kpreload is not installed and what to run", line, code, out, errOut)
			}
		}
	}
	if want := "kpreload status|kpreload status --json|kpreload status --root ./image-root"; strings.Join(ran, "|") != want {
		t.Errorf("examples %q, the test knows %q", ran, want)
	}
}

// TestStatusErrors: a root that does not exist, and one that is not
// kpreload's, are errors that say so (exit non-zero, nothing on stdout).
func TestStatusErrors(t *testing.T) {
	empty := t.TempDir()
	for _, c := range []struct {
		root, want string
	}{
		{"/nonexistent", "root /nonexistent: stat /nonexistent: no such file or directory"},
		{empty, "not a kpreload root: " + empty + " has no /boot/kpreload (`kpreload install --root " + empty + "` makes it boot kpreload)"},
	} {
		for _, args := range [][]string{{"status", "--root", c.root}, {"status", "--root", c.root, "--json"}} {
			code, out, errOut := runCLI(args...)
			if code == 0 || out != "" || !strings.Contains(errOut, c.want) {
				t.Errorf("%v: exit %d\nstdout %q\nstderr %s\nwant an error containing %q", args, code, out, errOut, c.want)
			}
		}
	}
}

// TestStatusBootedMachine: a root that booted through kpreload's /init
// gets the machine's lines: its driver with its flavour, the request, the
// CDI spec (missing here, a problem with its fix), Secure Boot, the kernels
// and one line per problem; --json carries the same.
func TestStatusBootedMachine(t *testing.T) {
	root := t.TempDir()
	statusRoot(t, root, true)
	code, out, errOut := runCLI("status", "--root", root)
	if code != 0 {
		t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
	}
	want := "booted: through kpreload's /init, kernel " + statusKernel + "\n" +
		"driver: kpreload-edu 1.0.0 (open), activated by /init\n" +
		"request: fw_cfg (fw_cfg opt/kpreload/instance.yaml (I/O ports)): version 1.0.0, flavour auto\n" +
		"cdi: /var/run/cdi/kpreload-edu.yaml (kpreload.dev/edu) missing: no spec at /var/run/cdi/kpreload-edu.yaml\n" +
		"secure boot: disabled, lockdown none; module signatures not enforced\n" +
		"default: " + statusKernel + " (the newest kernel with its driver cells)\n" +
		"* " + statusKernel + ": kpreload-edu 1.0.0 (open)\n" +
		"problem: the CDI spec of kpreload-edu 1.0.0: no spec at /var/run/cdi/kpreload-edu.yaml; fix: kpreload cdi refresh\n"
	if out != want {
		t.Errorf("status printed\n%s\nwant\n%s", out, want)
	}
	code, out, _ = runCLI("status", "--root", root, "--json")
	var got struct {
		Booted  bool `json:"booted"`
		Default string
		Kernels []struct {
			Drivers []string `json:"drivers"`
		} `json:"kernels"`
		Driver     struct{ Driver, Version, Flavor string }
		Request    struct{ Source, Version string }
		CDI        struct{ State string }
		SecureBoot struct{ State string } `json:"secure_boot"`
		Problems   []struct{ What, Fix string }
	}
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil {
		t.Fatalf("status --json: exit %d, %v\n%s", code, err, out)
	}
	if !got.Booted || got.Default != statusKernel || len(got.Kernels) != 1 || strings.Join(got.Kernels[0].Drivers, ",") != "kpreload-edu 1.0.0 (open)" ||
		got.Driver.Version != "1.0.0" || got.Driver.Flavor != "open" || got.Request.Source != "fw_cfg" || got.CDI.State != "missing" ||
		got.SecureBoot.State != "disabled" || len(got.Problems) != 1 || got.Problems[0].Fix != "kpreload cdi refresh" {
		t.Errorf("status --json = %+v\n%s", got, out)
	}
}

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
