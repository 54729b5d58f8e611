package main

import (
	"strings"
	"testing"
)

func TestSummarizeAB(t *testing.T) {
	var samples []Sample
	// Two rounds of four boots; B's driver binds 0.1 s sooner after the root.
	for run := 1; run <= 2; run++ {
		k := float64(run) // the kernel's own time moves; the rows measure from Run /init
		samples = append(samples,
			Sample{Kind: "boot", Variant: kpreload, Label: "old", Run: run, InitStart: k, Main: k + 0.1, EduBound: k + 1.0, RootReady: k + 0.9, RealInit: k + 1.4},
			Sample{Kind: "boot", Variant: kpreload, Label: "new", Run: run, InitStart: k, Main: k + 0.1, EduBound: k + 0.9, RootReady: k + 0.8, RealInit: k + 1.3},
			Sample{Kind: "boot", Variant: kpreloadEarly, Label: "old", Run: run, InitStart: k, Main: k + 0.1, EduBound: k + 0.2, RootReady: k + 1.0, RealInit: k + 1.3},
			Sample{Kind: "boot", Variant: kpreloadEarly, Label: "new", Run: run, InitStart: k, Main: k + 0.1, EduBound: k + 0.2, RootReady: k + 1.0, RealInit: k + 1.3},
			Sample{Kind: "build", Variant: kpreload, Label: "new", Run: run, Wall: 0.5})
	}
	res, err := summarizeAB(samples, "old", "new")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, r := range res.Rows {
		got[r.Path+"|"+r.Metric] = r.Delta
	}
	for key, want := range map[string]float64{
		"after the root|Run /init → test driver bound":                      -0.1,
		"after the root|Run /init → root disk ready (vda)":                  -0.1,
		"after the root|Run /init → Go main":                                0,
		"early|Run /init → test driver bound":                               0,
		"early|kernel start → Run /init (the same kernel: should not move)": 0,
	} {
		if d, ok := got[key]; !ok || d < want-1e-9 || d > want+1e-9 {
			t.Errorf("B − A for %s = %v (found %v), want %v", key, d, ok, want)
		}
	}
	var out strings.Builder
	if err := writeAB(&out, res, "3 boots of each, icount"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| path | medians (s) | A: old | B: new | B − A | B / A |",
		"| after the root | Run /init → test driver bound | 1.000 | 0.900 | -0.100 | 0.900 |",
		"3 boots of each, icount",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("A/B table lacks %q:\n%s", want, out.String())
		}
	}
	if _, err := summarizeAB(samples[1:], "old", "new"); err == nil || !strings.Contains(err.Error(), "1 boots of old and 2 of new") {
		t.Errorf("summarizeAB(one old boot missing) error = %v, want a count mismatch", err)
	}
	if _, err := summarizeAB(samples, "x", "y"); err == nil {
		t.Errorf("summarizeAB(unknown labels) = nil error, want one")
	}
}
