package reportcmd

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/bootcmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"
	"github.com/kpreload/kpreload/internal/efivar"
	"github.com/kpreload/kpreload/internal/termtext"
	"github.com/kpreload/kpreload/report"
	"github.com/kpreload/kpreload/testsupport/treetest"
)

// TestReportHelpExamples runs every example of `kpreload report --help`
// exactly as written, in a directory holding a real boot's report as
// report.json: the timeline printed names every module, --blame lists the
// phases and steps longest first and ends with the summary line, the
// picture is an SVG document naming the modules, the summary and the
// driver decision.
func TestReportHelpExamples(t *testing.T) {
	fixture, err := filepath.Abs("../../../../report/svg/testdata/report.json")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	code, help, _ := runCLI("report", "--help")
	if code != 0 {
		t.Fatalf("report --help: exit %d", code)
	}
	_, ex, ok := strings.Cut(help, "Examples:\n")
	if !ok {
		t.Fatalf("report --help has no Examples:\n%s", help)
	}
	ex, _, _ = strings.Cut(ex, "\n\n")
	t.Chdir(t.TempDir())
	if err := os.WriteFile("report.json", data, 0o644); err != nil {
		t.Fatal(err)
	}
	modules := []string{"virtio_blk", "virtio_pci", "kpreload_edu"}
	ran := 0
	for _, line := range strings.Split(ex, "\n") {
		args := strings.Fields(line)
		if len(args) < 2 || args[0] != "kpreload" || args[1] != "report" {
			t.Fatalf("example %q is not a kpreload report command", line)
		}
		code, out, errOut := runCLI(args[1:]...)
		if code != 0 {
			t.Fatalf("example %q: exit %d: %s", line, code, errOut)
		}
		ran++
		text := out
		if !strings.Contains(line, "--") && !strings.HasSuffix(out, "\n  Startup finished in 2.799s (kernel) + 0.486s (initramfs) = 3.285s (to the real init; target not recorded); drivers ready at 3.251s\n") {
			t.Errorf("example %q does not end with the summary line:\n%s", line, out)
		}
		if strings.Contains(line, "--blame") {
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != 2+6+7+1 {
				t.Errorf("example %q printed %d lines, want 2 phases, 6 steps, 7 modules and the summary:\n%s", line, len(lines), out)
			}
			for i, want := range map[int]string{0: "     2.799s kernel ", 1: "     0.486s initramfs (kpreload /init) ", 2: "     0.213s device scan (initramfs) ",
				len(lines) - 1: "Startup finished in 2.799s (kernel) + 0.486s (initramfs) = 3.285s"} {
				if i >= len(lines) || !strings.HasPrefix(lines[i], want) {
					t.Errorf("example %q: line %d should start %q:\n%s", line, i, want, out)
				}
			}
		}
		if strings.Contains(line, "--svg") {
			b, err := os.ReadFile("boot.svg")
			if err != nil {
				t.Fatalf("example %q: %v", line, err)
			}
			var doc struct{ XMLName xml.Name }
			if err := xml.Unmarshal(b, &doc); err != nil || doc.XMLName.Local != "svg" {
				t.Fatalf("example %q wrote no SVG document (%v): %.200s", line, err, b)
			}
			if want := "boot.svg: the timeline of report.json (7 modules)\n"; out != want {
				t.Errorf("example %q printed %q, want %q", line, out, want)
			}
			text = string(b)
			for _, want := range []string{"Startup finished in 2.799s (kernel) + 0.486s (initramfs)", "kpreload-edu 1.0.0, flavour -, from initramfs: chosen by the rule latest",
				"request from default (no instance request found", "root wait and mount"} {
				if !strings.Contains(text, want) {
					t.Errorf("example %q: the picture lacks %q", line, want)
				}
			}
		}
		for _, m := range modules {
			if !strings.Contains(text, m) {
				t.Errorf("example %q: %s missing from\n%s", line, m, text)
			}
		}
	}
	if ran != 3 {
		t.Errorf("%d examples ran, want 3", ran)
	}
}

func TestReportBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{\"modules\": 3}"), 0o644); err != nil {
		t.Fatal(err)
	}
	noReport := filepath.Join(dir, "boot.json")
	if err := os.WriteFile(noReport, []byte(`{"report": null, "kernel_lines": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"report", filepath.Join(dir, "none.json")}, "boot report: "},
		{[]string{"report", bad}, "boot report " + bad + ": "},
		{[]string{"report", "--svg", filepath.Join(dir, "no/such/dir/x.svg"), bad}, "boot report " + bad + ": "},
		{[]string{"report", "--svg", filepath.Join(dir, "x.svg"), "--blame", bad}, "--svg and --blame: choose one"},
		{[]string{"report", noReport}, "kpreload boot --json output " + noReport + ": the boot sent no report"},
	} {
		code, _, errOut := runCLI(c.args...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%q = exit %d, stderr %q, want failure with %q", c.args, code, errOut, c.want)
		}
	}
}

// TestReportReadsBootJSON: what kpreload boot --json printed adds the
// console's and the report channel's times to the report: the kernel
// running /init ends the kernel's phase, kpreload-up.service's record ends
// userspace's, and --blame and --svg show them.
func TestReportReadsBootJSON(t *testing.T) {
	data, err := os.ReadFile("../../../../report/svg/testdata/report.json")
	if err != nil {
		t.Fatal(err)
	}
	var rep report.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	up := &report.Up{Format: report.UpFormat, State: report.UpUp, Unit: report.UpUnit, Target: "multi-user.target", Time: 30.252}
	out, err := json.Marshal(bootcmd.JSON{Report: &rep, UntilMatch: "kpreload-up: {}", Up: up.Describe(), UpRecord: up,
		Kernel: []qemu.KernelLine{{Time: 2.701, Text: "Run /init as init process"}, {Time: 4.629, Text: "systemd[1]: systemd 252 running in system mode"}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "boot.json")
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
	code, blame, errOut := runCLI("report", "--blame", file)
	if code != 0 {
		t.Fatalf("report --blame: exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"    26.967s userspace up to multi-user.target (kpreload-up.service)   3.285–30.252 s\n     2.701s kernel ",
		"Startup finished in 2.701s (kernel) + 0.584s (initramfs) + 26.967s (userspace) = 30.252s; drivers ready at 3.251s\n",
	} {
		if !strings.Contains(blame, want) {
			t.Errorf("report --blame of boot --json output lacks %q:\n%s", want, blame)
		}
	}
	pic := filepath.Join(dir, "boot.svg")
	if code, _, errOut := runCLI("report", "--svg", pic, file); code != 0 {
		t.Fatalf("report --svg: exit %d: %s", code, errOut)
	}
	b, err := os.ReadFile(pic)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`class="phase k-userspace"`, "systemd started 4.629 s", "kernel runs /init 2.701 s", "multi-user.target (kpreload-up.service) 30.252 s"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the picture lacks %q", want)
		}
	}
}

// TestReportLoaderTimes: the running boot's own report takes the firmware's
// and systemd-boot's times from its EFI variables, as systemd-analyze does;
// the summary and the phases start with them.
func TestReportLoaderTimes(t *testing.T) {
	efivars := t.TempDir()
	for name, usec := range map[string]string{"LoaderTimeInitUSec": "1250000", "LoaderTimeExecUSec": "1750000"} {
		b := []byte{7, 0, 0, 0}
		for _, c := range usec + "\x00" {
			b = append(b, byte(c), 0)
		}
		if err := os.WriteFile(filepath.Join(efivars, name+"-"+efivar.LoaderGUID), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fixture := "../../../../report/svg/testdata/report.json"
	bt, err := readBoot(fixture, efivars)
	if err != nil {
		t.Fatal(err)
	}
	if want := "Startup finished in 1.250s (firmware) + 0.500s (loader) + 2.799s (kernel) + 0.486s (initramfs) = 5.035s"; !strings.HasPrefix(bt.Summary(), want) {
		t.Errorf("summary %q, want it to start %q", bt.Summary(), want)
	}
	// Another boot's report, or a machine without systemd-boot: no such times.
	for _, dir := range []string{"", t.TempDir()} {
		bt, err := readBoot(fixture, dir)
		if err != nil || bt.Firmware != 0 || bt.Loader != 0 {
			t.Errorf("readBoot(efivars %q) = firmware %v, loader %v, %v; want none", dir, bt.Firmware, bt.Loader, err)
		}
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
