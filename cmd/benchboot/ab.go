package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
)

// abMetric is one row of an A/B table: a time within one boot.
type abMetric struct {
	name string
	get  func(Sample) float64
}

// abMetrics are measured from the kernel's "Run /init" line, so what the
// kernel did before it (the same for both builds) drops out; the first row
// shows it did not move.
var abMetrics = []abMetric{
	{"kernel start → Run /init (the same kernel: should not move)", func(s Sample) float64 { return s.InitStart }},
	{"Run /init → Go main", func(s Sample) float64 { return s.Main - s.InitStart }},
	{"Run /init → test driver bound", func(s Sample) float64 { return s.EduBound - s.InitStart }},
	{"Run /init → root disk ready (vda)", func(s Sample) float64 { return s.RootReady - s.InitStart }},
	{"Run /init → real init (0.01 s steps)", func(s Sample) float64 { return s.RealInit - s.InitStart }},
}

// ABRow is one metric of one decision path for both builds.
type ABRow struct {
	Path   string    `json:"path"`
	Metric string    `json:"metric"`
	A      float64   `json:"a"`
	B      float64   `json:"b"`
	Delta  float64   `json:"b_minus_a"`
	ASamps []float64 `json:"a_samples"`
	BSamps []float64 `json:"b_samples"`
}

// ABResult is ab's output: every path's rows, with the builds' labels.
type ABResult struct {
	A    string  `json:"a"`
	B    string  `json:"b"`
	Rows []ABRow `json:"rows"`
}

// abPaths are the decision paths, in table order, with their names.
var abPaths = []struct{ variant, name string }{
	{kpreload, "after the root"},
	{kpreloadEarly, "early"},
}

// summarizeAB compares the boots labelled a with those labelled b, path by
// path; each path present needs the same non-zero number of boots of both.
func summarizeAB(samples []Sample, a, b string) (*ABResult, error) {
	res := &ABResult{A: a, B: b}
	for _, p := range abPaths {
		var as, bs []Sample
		for _, s := range samples {
			if s.Kind != "boot" || s.Variant != p.variant {
				continue
			}
			switch s.Label {
			case a:
				as = append(as, s)
			case b:
				bs = append(bs, s)
			}
		}
		if len(as) == 0 && len(bs) == 0 {
			continue
		}
		if len(as) != len(bs) {
			return nil, fmt.Errorf("%s: %d boots of %s and %d of %s, want the same number", p.name, len(as), a, len(bs), b)
		}
		for _, m := range abMetrics {
			r := ABRow{Path: p.name, Metric: m.name}
			for _, s := range as {
				r.ASamps = append(r.ASamps, m.get(s))
			}
			for _, s := range bs {
				r.BSamps = append(r.BSamps, m.get(s))
			}
			r.A, r.B = median(r.ASamps), median(r.BSamps)
			r.Delta = r.B - r.A
			res.Rows = append(res.Rows, r)
		}
	}
	if len(res.Rows) == 0 {
		return nil, fmt.Errorf("no kpreload boots labelled %s or %s", a, b)
	}
	return res, nil
}

func runAB(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("ab", flag.ContinueOnError)
	samplesFile := fs.String("samples", "", "samples file (JSON lines)")
	a := fs.String("a", "", "label of the first build (the baseline)")
	b := fs.String("b", "", "label of the second build")
	note := fs.String("note", "", "a line printed under the table (how the boots ran)")
	asJSON := fs.Bool("json", false, "print JSON instead of markdown")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *a == "" || *b == "" || *a == *b {
		return fmt.Errorf("-a %q -b %q: want two different labels", *a, *b)
	}
	samples, err := readSamples(*samplesFile)
	if err != nil {
		return err
	}
	res, err := summarizeAB(samples, *a, *b)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, res)
	}
	return writeAB(stdout, res, *note)
}

// writeAB prints the A/B table: medians, their difference and every sample.
func writeAB(w io.Writer, res *ABResult, note string) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "| path | medians (s) | A: %s | B: %s | B − A | B / A |\n", res.A, res.B)
	fmt.Fprintln(bw, "| --- | --- | ---: | ---: | ---: | ---: |")
	for _, r := range res.Rows {
		ratio := "–"
		if r.A != 0 && !math.IsNaN(r.A) {
			ratio = fmt.Sprintf("%.3f", r.B/r.A)
		}
		fmt.Fprintf(bw, "| %s | %s | %.3f | %.3f | %+.3f | %s |\n", r.Path, r.Metric, r.A, r.B, r.Delta, ratio)
	}
	if note != "" {
		fmt.Fprintln(bw)
		fmt.Fprintln(bw, note)
	}
	fmt.Fprintln(bw)
	fmt.Fprintln(bw, "Samples, in run order:")
	fmt.Fprintln(bw)
	fmt.Fprintf(bw, "| path | metric | A: %s | B: %s |\n", res.A, res.B)
	fmt.Fprintln(bw, "| --- | --- | --- | --- |")
	for _, r := range res.Rows {
		fmt.Fprintf(bw, "| %s | %s | %s | %s |\n", r.Path, r.Metric, list(r.ASamps), list(r.BSamps))
	}
	return bw.Flush()
}
