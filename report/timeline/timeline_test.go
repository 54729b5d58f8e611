package timeline

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/report"
)

// readFixture reads the report of a real direct-kernel boot (scripts/demo.sh:
// 6.1 cloud kernel, the test driver on QEMU's edu device).
func readFixture(t *testing.T) *report.Report {
	t.Helper()
	b, err := os.ReadFile("../svg/testdata/report.json")
	if err != nil {
		t.Fatal(err)
	}
	var r report.Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("report fixture: %v", err)
	}
	return &r
}

// names lists the steps' kinds and names, "kind:name".
func names(steps []Step) []string {
	var out []string
	for _, s := range steps {
		out = append(out, s.Kind+":"+s.Name)
	}
	return out
}

// TestPhases: the kernel band fills the time from 0 to /init, the
// initramfs's runs to the real init (or switch_root), userspace to the
// target where the run saw it, and firmware and loader lie before 0.
func TestPhases(t *testing.T) {
	r := readFixture(t)
	for _, c := range []struct {
		name string
		boot Boot
		want string
	}{
		{"report alone", Boot{Report: r}, "kernel 0.000-2.799|initramfs 2.799-3.285"},
		{"console and up record", Boot{Report: r, RunInit: 2.701, RealInit: 3.3, Up: 30.252, Target: "multi-user.target"},
			"kernel 0.000-2.701|initramfs 2.701-3.300|userspace 3.300-30.252"},
		{"firmware and loader", Boot{Report: r, Firmware: 1.5, Loader: 0.25}, "firmware -1.750--0.250|loader -0.250-0.000|kernel 0.000-2.799|initramfs 2.799-3.285"},
		{"no kpreload", Boot{RunInit: 4.047, RealInit: 7.58}, "kernel 0.000-4.047|initramfs 4.047-7.580"},
		{"nothing known", Boot{}, ""},
	} {
		var got []string
		for _, p := range c.boot.Phases() {
			got = append(got, fmt.Sprintf("%s %.3f-%.3f", p.Kind, p.Start, p.End))
		}
		if strings.Join(got, "|") != c.want {
			t.Errorf("%s: phases %q, want %q", c.name, strings.Join(got, "|"), c.want)
		}
	}
}

// TestSteps: /init's steps come in the order it runs them, bounded by the
// report's events and times, then every module load in start order.
func TestSteps(t *testing.T) {
	r := readFixture(t)
	steps := (&Boot{Report: r}).Steps()
	want := []string{"setup:/init start-up", "scan:device scan (initramfs)", "root:root wait and mount", "decision:driver decision", "drivers:driver loads", "handover:activation and switch_root",
		"module:virtio_ring", "module:virtio_pci_legacy_dev", "module:virtio", "module:virtio_pci_modern_dev", "module:virtio_blk", "module:virtio_pci", "module:kpreload_edu"}
	if got := names(steps); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("steps\n%q\nwant\n%q", got, want)
	}
	for i, c := range []struct{ start, end float64 }{
		{r.InitStart, 2.905985025}, // up to "boot index read"
		{2.905985025, 3.118697825}, // up to the last initramfs coldplug round
		{3.118697825, r.Root.Mounted},
		{r.Root.Mounted, r.Selection.Time},
		{r.Selection.Time, r.DriversReady},
		{r.DriversReady, r.SwitchRoot},
	} {
		if steps[i].Start != c.start || steps[i].End != c.end {
			t.Errorf("%s: %v–%v, want %v–%v", steps[i].Name, steps[i].Start, steps[i].End, c.start, c.end)
		}
	}
	if s := steps[4]; s.Detail != "kpreload-edu 1.0.0" {
		t.Errorf("driver loads' detail %q, want the chosen set", s.Detail)
	}
	if s := steps[12]; !strings.HasPrefix(s.Detail, "loaded; initramfs; for 0000:") {
		t.Errorf("kpreload_edu's detail %q, want its result, phase and device", s.Detail)
	}
	// A refused module is drawn as one; a decision taken before the root
	// (a complete initramfs index) starts after the boot index.
	r.Modules = append(r.Modules, report.Module{Name: "bad", Result: "refused", Start: 3.1, End: 3.0})
	r.Selection.Time = 2.95
	steps = (&Boot{Report: r}).Steps()
	for _, s := range steps {
		if s.Name == "bad" && (s.Kind != KindFailed || s.End != s.Start) {
			t.Errorf("refused module: %+v, want kind failed, no negative length", s)
		}
		if s.Kind == KindDecision && (s.Start != 2.905985025 || s.End != 2.95) {
			t.Errorf("early decision: %v–%v, want from the boot index read to 2.95", s.Start, s.End)
		}
	}
	if got := (&Boot{}).Steps(); got != nil {
		t.Errorf("steps of a boot without report: %v", got)
	}
}

func TestSummary(t *testing.T) {
	r := readFixture(t)
	for _, c := range []struct {
		boot Boot
		want string
	}{
		{Boot{Report: r}, "Startup finished in 2.799s (kernel) + 0.486s (initramfs) = 3.285s (to the real init; target not recorded); drivers ready at 3.251s"},
		{Boot{Report: r, RunInit: 2.701, Up: 30.252, Target: "multi-user.target"}, "Startup finished in 2.701s (kernel) + 0.584s (initramfs) + 26.967s (userspace) = 30.252s; drivers ready at 3.251s"},
		{Boot{}, "Startup: no times recorded"},
	} {
		if got := c.boot.Summary(); got != c.want {
			t.Errorf("summary\n%q\nwant\n%q", got, c.want)
		}
	}
}

// TestDecision: the chosen set with its version, flavour, origin and rule,
// where the request came from, and each excluded set with its rule.
func TestDecision(t *testing.T) {
	r := readFixture(t)
	got := strings.Join((&Boot{Report: r}).Decision(), "\n")
	want := "request from default (no instance request found: latest cached version, flavour auto): version latest, flavour auto\n" +
		"kpreload-edu 1.0.0, flavour -, from initramfs: chosen by the rule latest; loaded, active"
	if got != want {
		t.Errorf("decision\n%s\nwant\n%s", got, want)
	}
	d := &r.Selection.Drivers[0]
	d.Candidates = append(d.Candidates, report.SelectionCandidate{Version: "2.0.0", Flavor: "open", From: "rootfs", Excluded: "vermagic", Reason: "built for 6.12"})
	r.Selection.Drivers = append(r.Selection.Drivers, report.SelectionDriver{Driver: "nvidia", Refusal: "no set for this kernel"})
	got = strings.Join((&Boot{Report: r}).Decision(), "\n")
	for _, w := range []string{"  kpreload-edu 2.0.0, flavour open, from rootfs: excluded (vermagic): built for 6.12", "nvidia: nothing chosen: no set for this kernel"} {
		if !strings.Contains(got, w) {
			t.Errorf("decision lacks %q:\n%s", w, got)
		}
	}
	if (&Boot{}).Decision() != nil {
		t.Error("a boot without a report has a decision")
	}
}

// TestBlame: phases and steps longest first.
func TestBlame(t *testing.T) {
	r := readFixture(t)
	got := names((&Boot{Report: r}).Blame())
	want := []string{"kernel:kernel", "initramfs:initramfs (kpreload /init)", "scan:device scan (initramfs)", "setup:/init start-up", "module:virtio_pci"}
	if strings.Join(got[:5], "|") != strings.Join(want, "|") {
		t.Errorf("blame starts %q, want %q", got[:5], want)
	}
	if len(got) != 2+6+len(r.Modules) {
		t.Errorf("blame has %d lines, want every phase, step and module", len(got))
	}
	steps := (&Boot{Report: r}).Blame()
	for i := 1; i < len(steps); i++ {
		if steps[i].Duration() > steps[i-1].Duration() {
			t.Errorf("blame out of order at %d: %v after %v", i, steps[i], steps[i-1])
		}
	}
}

func TestMilestones(t *testing.T) {
	r := readFixture(t)
	var got []string
	for _, m := range (&Boot{Report: r, RunInit: 2.701, RealInit: 3.3, Up: 30.252, Target: "multi-user.target", Marks: []Mark{{4.629, "systemd started"}}}).Milestones() {
		got = append(got, m.Label)
	}
	want := []string{"kernel start", "kernel runs /init", "kpreload /init main", "root /dev/vda (ext4) mounted", "drivers ready", "switch_root", "real init", "systemd started", "multi-user.target"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("milestones %q, want %q", got, want)
	}
}
