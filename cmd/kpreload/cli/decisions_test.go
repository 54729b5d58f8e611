package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"
	"github.com/kpreload/kpreload/gpu/pci/pcitest"
	"github.com/kpreload/kpreload/gpu/switcher"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/report"
)

// decisionTable is testdata/decisions/requests.json: requests over one
// machine, each with the set every door must choose.
type decisionTable struct {
	Capture  string   `json:"capture"`
	Sets     []string `json:"sets"`
	Requests []struct {
		Name, Version, Flavor, Want string
	} `json:"requests"`
}

// cache makes a plan cache holding the table's sets ("DRIVER VERSION FLAVOR",
// each with the id DRIVER-VERSION-FLAVOR) and returns its directory.
func (tab decisionTable) cache(t *testing.T) string {
	t.Helper()
	var sets []bootindex.Set
	for _, s := range tab.Sets {
		f := strings.Fields(s)
		sets = append(sets, bootindex.Set{ID: strings.Join(f, "-"), Driver: f[0], Version: f[1], Flavor: f[2]})
	}
	return clitest.PlanCache(t, sets, nil)
}

func readDecisionTable(t *testing.T) decisionTable {
	t.Helper()
	b, err := os.ReadFile("../../../testdata/decisions/requests.json")
	if err != nil {
		t.Fatal(err)
	}
	var tab decisionTable
	if err := json.Unmarshal(b, &tab); err != nil {
		t.Fatalf("testdata/decisions/requests.json: %v", err)
	}
	return tab
}

// TestOneDecision runs each request of testdata/decisions through kpreload
// plan (the instance YAML's version: and flavor:) and kpreload switch
// --dry-run (VERSION and --flavor) over the same capture and cache: both must
// choose the table's set (initramfs/pid1's TestOneDecision runs /init's).
func TestOneDecision(t *testing.T) {
	tab := readDecisionTable(t)
	cache := tab.cache(t)
	root := pcitest.FromFixture(t, filepath.Join(pcitest.H200(t), "..", tab.Capture, "pci-sysfs.txt"))
	dir := t.TempDir()
	for _, tt := range tab.Requests {
		t.Run(tt.Name, func(t *testing.T) {
			yaml := "resources:\n  driver:\n    version: \"" + tt.Version + "\"\n"
			if tt.Flavor != "" {
				yaml += "    flavor: " + tt.Flavor + "\n"
			}
			inst := filepath.Join(dir, "instance.yaml")
			if err := os.WriteFile(inst, []byte(yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			if code := Execute([]string{"plan", "--sysfs", root, "--cache", cache, "--kernel", clitest.PlanKernel, "--instance", inst, "--json"}, &out, &errOut); code != 0 {
				t.Fatalf("plan: exit %d: %s", code, errOut.String())
			}
			var sel report.Selection
			if err := json.Unmarshal(out.Bytes(), &sel); err != nil || len(sel.Drivers) != 1 {
				t.Fatalf("plan --json: %v\n%s", err, out.String())
			}
			if got := clitest.ChosenText(&sel.Drivers[0]); got != tt.Want {
				t.Errorf("plan with version: %q, flavor: %q chose %q, want %q", tt.Version, tt.Flavor, got, tt.Want)
			}

			args := []string{"switch", tt.Version, "--dry-run", "--sysfs", root, "--cache", cache, "--kernel", clitest.PlanKernel, "--json"}
			if tt.Flavor != "" {
				args = append(args, "--flavor", tt.Flavor)
			}
			out.Reset()
			errOut.Reset()
			code := Execute(args, &out, &errOut)
			var res switcher.Result
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatalf("switch %s --dry-run --json: exit %d, %v: %s%s", tt.Version, code, err, out.String(), errOut.String())
			}
			if got := clitest.ChosenText(res.Decision); got != tt.Want || (code == 0) != (tt.Want != "") {
				t.Errorf("switch %s --dry-run (flavour %q): exit %d, chose %q, want %q; stderr %s", tt.Version, tt.Flavor, code, got, tt.Want, errOut.String())
			}
			// The text forms: switch --dry-run prints plan's decision, all
			// but its first line (where the request came from).
			planArgs := []string{"plan", "--sysfs", root, "--cache", cache, "--kernel", clitest.PlanKernel, "--instance", inst}
			_, planOut, _ := runCLI(planArgs...)
			var textArgs []string
			for _, a := range args[1:] {
				if a != "--json" {
					textArgs = append(textArgs, a)
				}
			}
			_, switchOut, switchErr := runCLI(append([]string{"switch"}, textArgs...)...)
			if tt.Want == "" {
				// A refusal is the one thing said: on stderr, stdout empty.
				if switchOut != "" || !strings.Contains(switchErr, "refused") {
					t.Errorf("switch %s --dry-run (refused) printed\n%s\nand on stderr\n%s\nwant only the refusal, on stderr", tt.Version, switchOut, switchErr)
				}
			} else if _, decision, _ := strings.Cut(planOut, "\n"); decision == "" || !strings.Contains(switchOut, decision) {
				t.Errorf("switch %s --dry-run printed\n%s\nwant plan's decision\n%s", tt.Version, switchOut, decision)
			}
			if tt.Want != "" && (res.To == nil || res.To.Driver+" "+res.To.Version+" "+res.To.Flavor != tt.Want) {
				t.Errorf("switch %s --dry-run: would switch to %+v, want %q", tt.Version, res.To, tt.Want)
			}
		})
	}
}

// TestSwitchOneStory: kpreload switch --dry-run tells one decision. A version
// the cache lacks is refused on stderr alone (no plan on stdout that would
// load another version, no decision in the --json record); an accepted one
// prints its candidate table once.
func TestSwitchOneStory(t *testing.T) {
	tab := readDecisionTable(t)
	cache := tab.cache(t)
	root := pcitest.FromFixture(t, filepath.Join(pcitest.H200(t), "..", tab.Capture, "pci-sysfs.txt"))
	base := []string{"switch", "--dry-run", "--sysfs", root, "--cache", cache, "--kernel", clitest.PlanKernel}

	code, out, errOut := runCLI(append(base, "999")...)
	if code == 0 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "no cached driver set 999") {
		t.Errorf("switch 999 --dry-run: exit %d, stdout\n%s\nstderr\n%s\nwant a non-zero exit and one line on stderr naming 999, nothing on stdout", code, out, errOut)
	}
	code, out, _ = runCLI(append(base, "999", "--json")...)
	var res switcher.Result
	if err := json.Unmarshal([]byte(out), &res); code == 0 || err != nil || res.Decision != nil || res.To != nil {
		t.Errorf("switch 999 --dry-run --json: exit %d, %v, record\n%s\nwant a non-zero exit and a record with no decision", code, err, out)
	}

	code, out, errOut = runCLI(append(base, "535")...)
	if code != 0 || errOut != "" {
		t.Fatalf("switch 535 --dry-run: exit %d, stderr %s", code, errOut)
	}
	if n := strings.Count(out, "nvidia-535.2  chosen"); n != 1 {
		t.Errorf("switch 535 --dry-run printed the chosen candidate %d times, want once:\n%s", n, out)
	}
	if first, _, _ := strings.Cut(out, "\n"); !strings.Contains(first, "535.261.03 open would be loaded") {
		t.Errorf("switch 535 --dry-run: first line %q, want the set it would load", first)
	}
}
