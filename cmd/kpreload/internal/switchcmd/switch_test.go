package switchcmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/clirun"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"
	"github.com/kpreload/kpreload/gpu/pci/pcitest"
	"github.com/kpreload/kpreload/gpu/switcher"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestSwitchRefusesAbsentVersion runs the real command against a cache that lacks
// the version asked for: it must say what the cache has and touch nothing.
func TestSwitchRefusesAbsentVersion(t *testing.T) {
	useRunDir(t, "kpreload/report.json") // a machine kpreload booted
	cache := t.TempDir()
	if err := os.MkdirAll(filepath.Join(cache, "index"), 0o755); err != nil {
		t.Fatal(err)
	}
	ix := &bootindex.Index{Format: bootindex.FormatVersion, Kernel: "6.1.0-test", Sets: []bootindex.Set{
		{ID: "a", Driver: "kpreload-edu", Version: "1.0.0", Flavor: "open", Dir: "../objects/sha256"},
		{ID: "b", Driver: "kpreload-edu", Version: "2.0.0", Flavor: "open", Dir: "../objects/sha256"},
	}}
	if err := bootindex.Write(filepath.Join(cache, "index", "6.1.0-test.json"), ix); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := cli.Execute([]string{"switch", "3.0.0", "--cache", cache, "--kernel", "6.1.0-test"}, &out, &errOut)
	want := "no cached driver set 3.0.0 for kernel 6.1.0-test; the cache has: kpreload-edu 1.0.0 (open), kpreload-edu 2.0.0 (open)"
	if code != 1 || !strings.Contains(errOut.String(), want) {
		t.Errorf("switch 3.0.0: exit %d, stderr %q; want 1 and %q", code, errOut.String(), want)
	}
	out.Reset()
	errOut.Reset()
	code = cli.Execute([]string{"switch", "3.0.0", "--cache", cache, "--kernel", "6.1.0-test", "--json"}, &out, &errOut)
	var res map[string]any
	if err := json.Unmarshal(out.Bytes(), &res); code != 1 || err != nil {
		t.Errorf("switch --json: exit %d, stdout %q (%v); want 1 and a JSON record", code, out.String(), err)
	}
	code = cli.Execute([]string{"switch"}, &out, &errOut)
	if code != 1 {
		t.Errorf("switch without VERSION: exit %d, want 1", code)
	}
}

// TestSwitchDryRunH200 checks a switch against the real H200 capture and
// NVIDIA's real lists without touching anything: switching to 535.261.03 is
// refused with the words kpreload plan (and /init) use, since 535's list does
// not name the H200; to a version whose set has no list it is allowed; and
// plan now compares the kernel's full vermagic, as /init does.
func TestSwitchDryRunH200(t *testing.T) {
	l535, _ := planLists(t)
	cache := clitest.PlanCache(t, []bootindex.Set{
		{ID: "a535o", Driver: "nvidia", Version: "535.261.03", Flavor: "open", SupportedGPUs: "l535/supported-gpus.json"},
		{ID: "b999o", Driver: "nvidia", Version: "999.1.2", Flavor: "open"},
	}, map[string]string{"l535/supported-gpus.json": l535})
	root := pcitest.FromFixture(t, filepath.Join(pcitest.H200(t), "pci-sysfs.txt"))
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := cli.Execute(append([]string{"switch"}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}

	code, out, errOut := run("535.261.03", "--dry-run", "--sysfs", root, "--cache", cache, "--kernel", clitest.PlanKernel, "--json")
	var res switcher.Result
	if err := json.Unmarshal([]byte(out), &res); code != 1 || err != nil || res.Decision == nil || res.Decision.Chosen != nil {
		t.Fatalf("switch 535 --dry-run --json: exit %d, %v, %+v; stderr %s", code, err, res, errOut)
	}
	want := "GPU 0000:00:06.0 10de:2335 (subsystem 10de:18bf) is not in 535.261.03's supported-gpus.json"
	if !strings.Contains(res.Decision.Refusal+fmt.Sprint(res.Decision.Candidates), want) || !strings.Contains(errOut, "refused, as /init would refuse it") {
		t.Errorf("switch 535 --dry-run: decision %+v, stderr %q; want a refusal naming %q", res.Decision, errOut, want)
	}

	code, out, errOut = run("999.1.2", "--dry-run", "--sysfs", root, "--cache", cache, "--kernel", clitest.PlanKernel)
	if code != 0 || !strings.Contains(out, "nvidia: 999.1.2 open would be loaded (version 999.1.2), no driver active now (dry run: nothing changed)") {
		t.Errorf("switch 999.1.2 --dry-run: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	if code, _, errOut = run("999.1.2", "--sysfs", root, "--cache", cache, "--kernel", clitest.PlanKernel); code != 1 || !strings.Contains(errOut, "only with --dry-run") {
		t.Errorf("switch --sysfs without --dry-run: exit %d, stderr %q; want a refusal", code, errOut)
	}
}

// useRunDir points switch at a run directory of the test's own holding the
// files named (relative to it), and back at the real one when the test ends.
func useRunDir(t *testing.T, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range files {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := switchRunDir
	switchRunDir = dir
	t.Cleanup(func() { switchRunDir = old })
	return dir
}

// TestSwitchChecksFirst: switch checks its flags and that the machine booted
// with kpreload before it looks at the cache or a module. A flavour outside
// the instance YAML's grammar is an error naming the valid ones (not a
// refusal suggesting --force); a machine with neither /init's boot report nor
// a readiness record is told what to run, before the cache is read
// (--cache /nonexistent would say so); --dry-run needs neither.
func TestSwitchChecksFirst(t *testing.T) {
	cache := t.TempDir()
	if err := os.MkdirAll(filepath.Join(cache, "index"), 0o755); err != nil {
		t.Fatal(err)
	}
	ix := &bootindex.Index{Format: bootindex.FormatVersion, Kernel: "6.1.0-test", Sets: []bootindex.Set{
		{ID: "a", Driver: "kpreload-edu", Version: "1.0.0", Flavor: "open", Dir: "../objects/sha256"},
	}}
	if err := bootindex.Write(filepath.Join(cache, "index", "6.1.0-test.json"), ix); err != nil {
		t.Fatal(err)
	}
	const (
		report    = "kpreload/report.json"
		ready     = "kpreload/ready"
		flavorErr = "kpreload: switch: --flavor: want open, proprietary or auto, got \"opne\"\n"
		noCache   = "kpreload: switch: the cache /nonexistent has no boot index for kernel 6.1.0-test"
	)
	notKpreload := func(run string) string {
		return "kpreload: switch: this machine did not boot with kpreload (no boot report at " + run + "/kpreload/report.json, no active driver set at " + run + "/kpreload/ready): run kpreload install and reboot, or boot an image kpreload made; kpreload switch --dry-run takes the decision anywhere\n"
	}
	for _, tc := range []struct {
		name  string
		run   []string // files in the run directory
		args  []string
		code  int
		want  string // stderr, whole
		start string // or its start
	}{
		{"flavour typo", []string{report, ready}, []string{"1.0.0", "--flavor", "opne", "--cache", cache, "--kernel", "6.1.0-test"}, 1, flavorErr, ""},
		{"flavour typo, dry run", nil, []string{"1.0.0", "--flavor", "opne", "--dry-run", "--cache", cache, "--kernel", "6.1.0-test"}, 1, flavorErr, ""},
		{"flavour typo before the machine", nil, []string{"1.0.0", "--flavor", "opne", "--cache", "/nonexistent", "--kernel", "6.1.0-test"}, 1, flavorErr, ""},
		{"flavour in another case", []string{report}, []string{"1.0.0", "--flavor", "Open", "--cache", cache, "--kernel", "6.1.0-test"}, 1,
			"kpreload: switch: --flavor: want open, proprietary or auto, got \"Open\"\n", ""},
		{"not a kpreload machine", nil, []string{"1.0.0", "--cache", "/nonexistent", "--kernel", "6.1.0-test"}, 1, "@notKpreload", ""},
		{"not a kpreload machine, valid flavour", nil, []string{"1.0.0", "--flavor", "proprietary", "--cache", "/nonexistent", "--kernel", "6.1.0-test"}, 1, "@notKpreload", ""},
		{"boot report only", []string{report}, []string{"1.0.0", "--flavor", "auto", "--cache", "/nonexistent", "--kernel", "6.1.0-test"}, 1, "", noCache},
		{"readiness record only", []string{ready}, []string{"1.0.0", "--flavor", "open", "--cache", "/nonexistent", "--kernel", "6.1.0-test"}, 1, "", noCache},
		{"dry run on any machine", nil, []string{"1.0.0", "--dry-run", "--cache", "/nonexistent", "--kernel", "6.1.0-test"}, 1, "", noCache},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := useRunDir(t, tc.run...)
			want := tc.want
			if want == "@notKpreload" {
				want = notKpreload(run)
			}
			var out, errOut bytes.Buffer
			code := cli.Execute(append([]string{"switch"}, tc.args...), &out, &errOut)
			got := errOut.String()
			if code != tc.code || (want != "" && got != want) || (tc.start != "" && !strings.HasPrefix(got, tc.start)) {
				t.Errorf("switch %v: exit %d, stderr %q; want exit %d and %q%q", tc.args, code, got, tc.code, want, tc.start)
			}
			if strings.Contains(got, "--force") {
				t.Errorf("switch %v suggests --force: %q", tc.args, got)
			}
		})
	}
}

// TestSwitchHelpExamples runs the examples of `kpreload switch --help`
// exactly as written in a checkout (dry runs against the committed captures
// and bundle): branch 535 on the H100 is the 535 proprietary set, the only 535
// set cached; 550 open on the H200 is the 550 open set.
func TestSwitchHelpExamples(t *testing.T) {
	clitest.InCheckout(t, testenv.RepoRoot(t))
	lines := cli.ExamplesOf(t, "kpreload switch")
	if len(lines) != 2 {
		t.Fatalf("switch examples: %q, want two", lines)
	}
	out := cli.RunLine(t, lines[0])
	if first, _, _ := strings.Cut(out, "\n"); first != "nvidia: 535.261.03 proprietary would be loaded (branch 535), no driver active now (dry run: nothing changed)" {
		t.Errorf("%s printed\n%s", lines[0], out)
	}
	var res switcher.Result
	if err := json.Unmarshal([]byte(cli.RunLine(t, lines[1])), &res); err != nil || res.To == nil ||
		res.To.Driver+" "+res.To.Version+" "+res.To.Flavor != "nvidia 550.163.01 open" {
		t.Errorf("%s: would switch to %+v (%v), want nvidia 550.163.01 open", lines[1], res.To, err)
	}
}

// TestPrintSwitchOutcome: what a switch says it did, and what a dry run
// says it would replace.
func TestPrintSwitchOutcome(t *testing.T) {
	to := &switcher.SetRef{Driver: "nvidia", Version: "550.54.14"}
	from := &switcher.SetRef{Driver: "nvidia", Version: "535.261.03"}
	for _, tt := range []struct {
		res      switcher.Result
		want     string
		wantFrom string
	}{
		{switcher.Result{To: to, Unchanged: true}, "nvidia 550.54.14 is already active\n", "already active"},
		{switcher.Result{To: to, Seconds: 1.5}, "nvidia 550.54.14 loaded in 1.50s\n", "no driver active now"},
		{switcher.Result{To: to, From: from, Seconds: 2, Bound: []switcher.Binding{{Device: "0000:00:03.0", Driver: "nvidia"}}},
			"nvidia 535.261.03 -> 550.54.14 in 2.00s\n  0000:00:03.0 bound to nvidia\n", "replacing 535.261.03"},
	} {
		var b bytes.Buffer
		printSwitchOutcome(&b, &tt.res)
		if got := b.String(); got != tt.want {
			t.Errorf("printSwitchOutcome(%+v) = %q, want %q", tt.res, got, tt.want)
		}
		if got := fromText(&tt.res); got != tt.wantFrom {
			t.Errorf("fromText(%+v) = %q, want %q", tt.res, got, tt.wantFrom)
		}
	}
}

// TestNeedsRootCheckedFirst: with clirun.EffectiveUID standing for an ordinary user, a
// switch that would load modules stops at the check, before its arguments'
// names or the cache are looked at; as root the check lets it through.
func TestNeedsRootCheckedFirst(t *testing.T) {
	defer func(f func() int) { clirun.EffectiveUID = f }(clirun.EffectiveUID)
	clirun.EffectiveUID = func() int { return 1000 }
	code, out, errOut := runCLI("switch", "550", "--cache", "/nonexistent")
	if want := "kpreload: switch needs root (it unloads and loads kernel modules; --dry-run only takes the decision): run it with sudo\n"; code == 0 || out != "" || errOut != want {
		t.Errorf("switch 550 as uid 1000: exit %d, stdout %q, stderr %q; want only %q", code, out, errOut, want)
	}
	clirun.EffectiveUID = func() int { return 0 }
	useRunDir(t, "kpreload/report.json") // a machine kpreload booted
	if _, _, errOut := runCLI("switch", "550", "--cache", "/nonexistent"); strings.Contains(errOut, "needs root") || !strings.Contains(errOut, "/nonexistent") {
		t.Errorf("switch 550 as root: %q; want the cache's error, not the root check", errOut)
	}
}

// TestSwitchRequest: the request a switch keeps: none without a file, the
// file's when given, an error naming a bad one.
func TestSwitchRequest(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "instance.yaml")
	if err := os.WriteFile(good, []byte("resources:\n  driver:\n    version: \"550\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if req, err := switchRequest("", false); err != nil || req.Source != "" {
		t.Errorf("switchRequest(none, another machine) = %+v, %v; want no request", req, err)
	}
	if req, err := switchRequest(good, true); err != nil || req.Source != "file" || req.Origin != good || req.Instance.Resources.Driver.Version != "550" {
		t.Errorf("switchRequest(%s) = %+v, %v; want the file's request", good, req, err)
	}
	if _, err := switchRequest(filepath.Join(dir, "absent.yaml"), true); err == nil || !strings.Contains(err.Error(), "absent.yaml") {
		t.Errorf("switchRequest(absent) = %v, want an error naming the file", err)
	}
}
