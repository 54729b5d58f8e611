package cli

import (
	"bytes"
	"testing"

	"github.com/kpreload/kpreload/gpu/switcher"
)

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
