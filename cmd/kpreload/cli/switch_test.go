package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/gpu/pci/pcitest"
	"github.com/kpreload/kpreload/gpu/switcher"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
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
	code := Execute([]string{"switch", "3.0.0", "--cache", cache, "--kernel", "6.1.0-test"}, &out, &errOut)
	want := "no cached driver set 3.0.0 for kernel 6.1.0-test; the cache has: kpreload-edu 1.0.0 (open), kpreload-edu 2.0.0 (open)"
	if code != 1 || !strings.Contains(errOut.String(), want) {
		t.Errorf("switch 3.0.0: exit %d, stderr %q; want 1 and %q", code, errOut.String(), want)
	}
	out.Reset()
	errOut.Reset()
	code = Execute([]string{"switch", "3.0.0", "--cache", cache, "--kernel", "6.1.0-test", "--json"}, &out, &errOut)
	var res map[string]any
	if err := json.Unmarshal(out.Bytes(), &res); code != 1 || err != nil {
		t.Errorf("switch --json: exit %d, stdout %q (%v); want 1 and a JSON record", code, out.String(), err)
	}
	code = Execute([]string{"switch"}, &out, &errOut)
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
	cache := planCache(t, []bootindex.Set{
		{ID: "a535o", Driver: "nvidia", Version: "535.261.03", Flavor: "open", SupportedGPUs: "l535/supported-gpus.json"},
		{ID: "b999o", Driver: "nvidia", Version: "999.1.2", Flavor: "open"},
	}, map[string]string{"l535/supported-gpus.json": l535})
	root := pcitest.FromFixture(t, filepath.Join(pcitest.H200(t), "pci-sysfs.txt"))
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Execute(append([]string{"switch"}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}

	code, out, errOut := run("535.261.03", "--dry-run", "--sysfs", root, "--cache", cache, "--kernel", planKernel, "--json")
	var res switcher.Result
	if err := json.Unmarshal([]byte(out), &res); code != 1 || err != nil || res.Decision == nil || res.Decision.Chosen != nil {
		t.Fatalf("switch 535 --dry-run --json: exit %d, %v, %+v; stderr %s", code, err, res, errOut)
	}
	want := "GPU 0000:00:06.0 10de:2335 (subsystem 10de:18bf) is not in 535.261.03's supported-gpus.json"
	if !strings.Contains(res.Decision.Refusal+fmt.Sprint(res.Decision.Candidates), want) || !strings.Contains(errOut, "refused, as /init would refuse it") {
		t.Errorf("switch 535 --dry-run: decision %+v, stderr %q; want a refusal naming %q", res.Decision, errOut, want)
	}

	code, out, errOut = run("999.1.2", "--dry-run", "--sysfs", root, "--cache", cache, "--kernel", planKernel)
	if code != 0 || !strings.Contains(out, "nvidia: 999.1.2 open would be loaded (version 999.1.2), no driver active now (dry run: nothing changed)") {
		t.Errorf("switch 999.1.2 --dry-run: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	if code, _, errOut = run("999.1.2", "--sysfs", root, "--cache", cache, "--kernel", planKernel); code != 1 || !strings.Contains(errOut, "only with --dry-run") {
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
			code := Execute(append([]string{"switch"}, tc.args...), &out, &errOut)
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
