package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSampleSlowRoot(t *testing.T) {
	for _, c := range []struct {
		name          string
		want, plugged float64
		wantErr       string
	}{
		{"root there from the start", 0, 0, ""},
		{"plugged as asked", 8, 8.004, ""},
		{"plugged too early", 8, 0, "plugged in at 0.0 s, want 8 s"},
		{"plugged but not asked", 0, 8, "-slow-root was not given"},
	} {
		var s Sample
		err := s.slowRoot(c.want, c.plugged)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if c.wantErr == "" && err != nil || c.wantErr != "" && !strings.Contains(got, c.wantErr) {
			t.Errorf("slowRoot(%s) = %v, want error %q", c.name, err, c.wantErr)
		}
		if err == nil && (s.SlowRoot != c.want || s.RootPlugged != c.plugged) {
			t.Errorf("slowRoot(%s) tagged %+v, want %v plugged at %v", c.name, s, c.want, c.plugged)
		}
	}
}

// slowBoots is one round of slow-root boots: Debian, after the root and
// early, the early one binding its driver at earlyBound.
func slowBoots(run int, earlyBound float64) []Sample {
	b := func(v string, bound float64) Sample {
		return Sample{Kind: "boot", Variant: v, Run: run, SlowRoot: 8, RootPlugged: 8.01, InitStart: 3, RootReady: 9, RootMounted: 9.2, EduBound: bound, RealInit: 9.6}
	}
	return []Sample{b(debian, 6.5), b(kpreload, 9.5), b(kpreloadEarly, earlyBound)}
}

func TestSummarizeSlowRoot(t *testing.T) {
	for _, c := range []struct {
		name                  string
		early                 []float64 // the early boot's driver bound, round by round
		wantBefore, wantFastr bool
		wantCount             int
	}{
		{"early before the root every time", []float64{3.4, 3.6}, true, true, 2},
		{"one early boot after the root", []float64{3.4, 9.3}, false, true, 1},
		{"one early boot after the after-root one", []float64{3.4, 9.7}, false, false, 1},
	} {
		var samples []Sample
		for i, e := range c.early {
			samples = append(samples, slowBoots(i+1, e)...)
		}
		sr, err := summarizeSlowRoot(samples)
		if err != nil {
			t.Fatal(err)
		}
		if sr.EarlyBeforeRoot != c.wantBefore || sr.EarlyNotSlower != c.wantFastr || sr.BoundBefore[kpreloadEarly] != c.wantCount {
			t.Errorf("%s: before root %v, not slower %v, %d early boots bound before the root; want %v, %v, %d",
				c.name, sr.EarlyBeforeRoot, sr.EarlyNotSlower, sr.BoundBefore[kpreloadEarly], c.wantBefore, c.wantFastr, c.wantCount)
		}
		if got, want := sr.BoundBefore[debian], 2; got != want {
			t.Errorf("%s: Debian bound before the root in %d boots, want %d", c.name, got, want)
		}
	}
	if sr, err := summarizeSlowRoot(nil); sr != nil || err != nil {
		t.Errorf("summarizeSlowRoot(nil) = %+v, %v; want nil, nil", sr, err)
	}
	mixed := append(slowBoots(1, 3.4), Sample{Kind: "boot", Variant: kpreload, Run: 2, SlowRoot: 5})
	if _, err := summarizeSlowRoot(mixed); err == nil || !strings.Contains(err.Error(), "one delay") {
		t.Errorf("summarizeSlowRoot(two delays) error = %v, want one about the delay", err)
	}
}

// TestReportSlowRoot runs report on a run with slow-root boots beside the
// others: the main table stays as it was, the slow-root table follows.
func TestReportSlowRoot(t *testing.T) {
	var lines []string
	add := func(s Sample) {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, string(b))
	}
	for run := 1; run <= 2; run++ {
		for _, v := range []string{debian, kpreload, kpreloadEarly} {
			add(Sample{Kind: "boot", Variant: v, Run: run, InitStart: 3, RootReady: 3.5, RootMounted: 3.7, EduBound: 3.9, RealInit: 4.2, Wall: 5})
			add(Sample{Kind: "build", Variant: v, Run: run, Wall: 1, Bytes: 1000})
		}
		for _, s := range slowBoots(run, 3.5) {
			add(s)
		}
	}
	add(Sample{Kind: "hung", Variant: kpreloadEarly, Run: 2, SlowRoot: 8})
	file := filepath.Join(t.TempDir(), "samples.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run([]string{"report", "-samples", file, "-runs", "2"}, &out, &out); err != nil {
		t.Fatalf("report: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"| kernel start → test driver bound (kpreload_edu) | 3.900 s | 3.900 s | 1.000 | 3.900 s | 1.000 |",
		"| slow root: plugged in 8 s after QEMU started, median of 2 runs | Debian initramfs-tools | kpreload, decision after root | kpreload, early decision |",
		"| kernel start → root mounted (EXT4-fs (vda): mounted) | 9.200 s | 9.200 s | 9.200 s |",
		"| test driver bound before the root was mounted | 2 of 2 boots | 0 of 2 boots | 2 of 2 boots |",
		"in every boot: yes. Early not slower than after the root (driver bound, every round): yes; early − after root, round by round: driver bound -6.000, -6.000 s",
		"run again: Debian 0, kpreload 0, early 1.",
		"| kernel start → test driver bound (kpreload_edu) | 6.500, 6.500 | 9.500, 9.500 | 3.500, 3.500 |",
		"| root mounted → real init runs (what is left once the root is there) | 0.400 s | 0.400 s | 0.400 s |",
		"root mounted → real init +0.000, +0.000 s.",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}
