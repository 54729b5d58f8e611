package pid1

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/gpu/instance"
)

// TestOneDecision runs each request of testdata/decisions through /init's
// decision, the instance YAML in the root's /etc/kpreload/instance.yaml and
// the sets in the root's cache, over the same capture kpreload plan and
// switch --dry-run read in cmd/kpreload/cli's TestOneDecision: /init must
// choose the same set.
func TestOneDecision(t *testing.T) {
	b, err := os.ReadFile("../../testdata/decisions/requests.json")
	if err != nil {
		t.Fatal(err)
	}
	var tab struct {
		Capture  string   `json:"capture"`
		Sets     []string `json:"sets"`
		Requests []struct{ Name, Version, Flavor, Want string }
	}
	if err := json.Unmarshal(b, &tab); err != nil {
		t.Fatalf("testdata/decisions/requests.json: %v", err)
	}
	for _, tt := range tab.Requests {
		t.Run(tt.Name, func(t *testing.T) {
			f := newFixture(t, tab.Capture)
			for _, s := range tab.Sets {
				w := strings.Fields(s)
				f.rootSets = append(f.rootSets, nvidia(w[1], w[2]))
			}
			yaml := "resources:\n  driver:\n    version: \"" + tt.Version + "\"\n"
			if tt.Flavor != "" {
				yaml += "    flavor: " + tt.Flavor + "\n"
			}
			f.write(filepath.Join("newroot", instance.ImagePath), yaml)
			o := f.boot()
			sel := o.rep.Selection
			if sel == nil {
				t.Fatalf("no driver decision; console:\n%s", o.console)
			}
			got := ""
			for _, dd := range sel.Drivers {
				if dd.Driver == "nvidia" && dd.Chosen != nil {
					got = dd.Driver + " " + dd.Chosen.Version + " " + dd.Chosen.Flavor
				}
			}
			if got != tt.Want || sel.Source != instance.SourceImage {
				t.Errorf("/init with version: %q, flavor: %q (request from %s) chose %q, want %q", tt.Version, tt.Flavor, sel.Source, got, tt.Want)
			}
		})
	}
}
