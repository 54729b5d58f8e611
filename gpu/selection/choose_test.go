package selection

import (
	"errors"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
)

// TestChoose reads a switch's target as the instance YAML's version: and
// flavor:, and names the set to load, refuses as /init would, or says what
// the cache holds.
func TestChoose(t *testing.T) {
	vm := "6.1.0-test SMP mod_unload "
	mk := func(drv, id, v, fl string) Set {
		return Set{Set: &bootindex.Set{ID: id, Driver: drv, Version: v, Flavor: fl, Modules: []bootindex.Module{{Name: "m", Vermagic: vm}}}, From: "cache"}
	}
	m := &Machine{Kernel: "6.1.0-test", Sets: []Set{mk("nvidia", "a", "1.0", "open"), mk("nvidia", "b", "2.0", "open"), mk("nvidia", "c", "2.1", "proprietary"), mk("kpreload-edu", "e", "1.0.0", "open")}}
	cuda := instance.Request{Source: "file", Origin: "i.yaml"}
	cuda.Instance.Resources.Driver.CUDA = "12.2" // driver >= 535.54.03: every set here is below
	tests := []struct {
		name   string
		req    instance.Request
		target Target
		set    string // the chosen set's id
		err    string
		forced bool
	}{
		{"branch 2", instance.Request{}, Target{Version: "2"}, "c", "", false},
		{"branch 2, open", instance.Request{}, Target{Version: "2", Flavor: "open"}, "b", "", false},
		{"exact", instance.Request{}, Target{Version: "1.0"}, "a", "", false},
		{"absent", instance.Request{}, Target{Version: "3"}, "", "no cached driver set 3 for kernel 6.1.0-test; the cache has: nvidia 1.0 (open), nvidia 2.0 (open), nvidia 2.1 (proprietary), kpreload-edu 1.0.0 (open)", false},
		{"below the CUDA minimum", cuda, Target{Version: "2"}, "", "refused, as /init would refuse it: no nvidia driver will be loaded", false},
		{"forced past the CUDA minimum", cuda, Target{Version: "2", Flavor: "open", Force: true}, "b", "", true},
		{"a driver the request does not apply to", instance.Request{}, Target{Version: "1.0.0", Driver: "kpreload-edu"}, "", "the request applies to the GPU driver, not kpreload-edu", false},
		{"no version", instance.Request{}, Target{}, "", "no driver version given", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := m.Choose(tt.req, tt.target)
			got := ""
			if c.Set != nil {
				got = c.Set.Set.ID
			}
			if got != tt.set || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) || (c.Forced != "") != tt.forced {
				t.Errorf("Choose(%+v) = set %q, forced %q, %v; want %q, forced %v, error %q", tt.target, got, c.Forced, err, tt.set, tt.forced, tt.err)
			}
			var refused *RefusedError
			if errors.As(err, &refused) && refused.Refusal != c.Driver.Refusal {
				t.Errorf("refusal %q, decision's %q: want the same words", refused.Refusal, c.Driver.Refusal)
			}
		})
	}
}
