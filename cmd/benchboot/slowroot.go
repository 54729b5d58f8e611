package main

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// SlowRoot is the table of the boots whose root disk was plugged in late
// (scripts/bench-boot.sh --slow-root): where the early decision has a root's
// wait to hide its driver's load in, as on a cloud whose root volume
// appears while the machine boots.
type SlowRoot struct {
	// Seconds is how long after QEMU started the root disk was plugged in.
	Seconds float64 `json:"seconds"`
	// Variants are the variants that ran, in table order.
	Variants []string  `json:"variants"`
	Rows     []SlowRow `json:"rows"`
	// BoundBefore counts, per variant, the boots whose test driver was
	// bound before the root was mounted; Boots the boots.
	BoundBefore map[string]int `json:"driver_bound_before_root"`
	Boots       map[string]int `json:"boots"`
	// Rounds are each round's early and after-root boots side by side.
	Rounds []SlowRound `json:"rounds"`
	// EarlyBeforeRoot says every early boot had its driver bound before the
	// root was mounted; EarlyNotSlower that in every round the early boot's
	// driver was bound no later than the after-root boot's.
	EarlyBeforeRoot bool `json:"early_driver_before_root"`
	EarlyNotSlower  bool `json:"early_not_slower"`
	// Hung counts, per variant, the boots that timed out and were run again.
	Hung map[string]int `json:"hung_boots_rerun"`
}

// SlowRow is one measure of the slow-root table: each variant's median and
// samples in run order.
type SlowRow struct {
	Name    string               `json:"name"`
	Medians map[string]float64   `json:"medians"`
	Samples map[string][]float64 `json:"samples"`
}

// SlowRound is one round's early and after-root boots: when each bound the
// test driver, and how long each took from the root's mount to the real
// init (the disk is plugged in at a wall-clock time, so the kernel time it
// appears at moves from boot to boot with QEMU's start).
type SlowRound struct {
	Run            int     `json:"run"`
	AfterBound     float64 `json:"after_root_bound"`
	EarlyBound     float64 `json:"early_bound"`
	AfterRootInit  float64 `json:"after_root_mounted_to_real_init"`
	EarlyRootInit  float64 `json:"early_mounted_to_real_init"`
	EarlyMinusBnd  float64 `json:"early_minus_after_root_bound"`
	EarlyMinusInit float64 `json:"early_minus_after_root_mounted_to_real_init"`
}

// slowRoot tags s as a boot whose root disk was to be plugged in want
// seconds after QEMU started (0: there from the start), and checks that
// kpreload boot says it was (plugged, its root_plugged_seconds).
func (s *Sample) slowRoot(want, plugged float64) error {
	switch {
	case want <= 0 && plugged > 0:
		return fmt.Errorf("the root disk was plugged in late (%.1f s) but -slow-root was not given", plugged)
	case want <= 0:
		return nil
	case plugged < want:
		return fmt.Errorf("the root disk was plugged in at %.1f s, want %g s after QEMU started (kpreload boot --root-late)", plugged, want)
	}
	s.SlowRoot, s.RootPlugged = want, plugged
	return nil
}

// splitSlowRoot parts the samples into the builds and the boots whose root
// was there from the start, and the slow-root boots (and their hangs).
func splitSlowRoot(samples []Sample) (main, slow []Sample) {
	for _, s := range samples {
		if s.SlowRoot > 0 {
			slow = append(slow, s)
		} else {
			main = append(main, s)
		}
	}
	return main, slow
}

// slowMeasures are the slow-root table's rows.
var slowMeasures = []struct {
	name string
	get  func(Sample) float64
}{
	{"QEMU start → root disk plugged in (wall clock)", func(s Sample) float64 { return s.RootPlugged }},
	{"kernel start → root disk driver ready (virtio_blk [vda])", func(s Sample) float64 { return s.RootReady }},
	{"kernel start → root mounted (EXT4-fs (vda): mounted)", func(s Sample) float64 { return s.RootMounted }},
	{"kernel start → test driver bound (kpreload_edu)", func(s Sample) float64 { return s.EduBound }},
	{"test driver bound − root mounted (below 0: before the root)", func(s Sample) float64 { return s.EduBound - s.RootMounted }},
	{"kernel start → real init runs (/sbin/init)", func(s Sample) float64 { return s.RealInit }},
	{"root mounted → real init runs (what is left once the root is there)", func(s Sample) float64 { return s.RealInit - s.RootMounted }},
}

// summarizeSlowRoot computes the slow-root table, nil for no samples. Every
// boot must have had the same delay.
func summarizeSlowRoot(samples []Sample) (*SlowRoot, error) {
	if len(samples) == 0 {
		return nil, nil
	}
	sr := &SlowRoot{Seconds: samples[0].SlowRoot, BoundBefore: map[string]int{}, Boots: map[string]int{}, Hung: map[string]int{},
		EarlyBeforeRoot: true, EarlyNotSlower: true}
	byRun := map[string]map[int]Sample{}
	for _, s := range samples {
		if s.SlowRoot != sr.Seconds {
			return nil, fmt.Errorf("slow-root boots plugged their root in after %g s and %g s: want one delay a run", sr.Seconds, s.SlowRoot)
		}
		if s.Kind == "hung" {
			sr.Hung[s.Variant]++
			continue
		}
		if byRun[s.Variant] == nil {
			byRun[s.Variant] = map[int]Sample{}
		}
		byRun[s.Variant][s.Run] = s
		sr.Boots[s.Variant]++
		if s.EduBound < s.RootMounted {
			sr.BoundBefore[s.Variant]++
		}
	}
	for _, v := range []string{debian, kpreload, kpreloadEarly} {
		if len(byRun[v]) > 0 {
			sr.Variants = append(sr.Variants, v)
		}
	}
	for _, m := range slowMeasures {
		row := SlowRow{Name: m.name, Medians: map[string]float64{}, Samples: map[string][]float64{}}
		for _, v := range sr.Variants {
			for _, run := range slices.Sorted(maps.Keys(byRun[v])) {
				row.Samples[v] = append(row.Samples[v], m.get(byRun[v][run]))
			}
			row.Medians[v] = median(row.Samples[v])
		}
		sr.Rows = append(sr.Rows, row)
	}
	sr.EarlyBeforeRoot = sr.Boots[kpreloadEarly] > 0 && sr.BoundBefore[kpreloadEarly] == sr.Boots[kpreloadEarly]
	for _, run := range slices.Sorted(maps.Keys(byRun[kpreloadEarly])) {
		a, ok := byRun[kpreload][run]
		if !ok {
			continue
		}
		e := byRun[kpreloadEarly][run]
		r := SlowRound{Run: run, AfterBound: a.EduBound, EarlyBound: e.EduBound,
			AfterRootInit: a.RealInit - a.RootMounted, EarlyRootInit: e.RealInit - e.RootMounted, EarlyMinusBnd: e.EduBound - a.EduBound}
		r.EarlyMinusInit = r.EarlyRootInit - r.AfterRootInit
		sr.Rounds = append(sr.Rounds, r)
		sr.EarlyNotSlower = sr.EarlyNotSlower && r.EarlyMinusBnd <= 0
	}
	sr.EarlyNotSlower = sr.EarlyNotSlower && len(sr.Rounds) > 0
	return sr, nil
}

// slowNames are the slow-root table's column heads.
var slowNames = map[string]string{debian: "Debian initramfs-tools", kpreload: "kpreload, decision after root", kpreloadEarly: "kpreload, early decision"}

// writeSlowRoot prints the slow-root table after the main one; nothing for nil.
func writeSlowRoot(w io.Writer, sr *SlowRoot) error {
	if sr == nil {
		return nil
	}
	bw := bufio.NewWriter(w)
	heads := []string{fmt.Sprintf("slow root: plugged in %g s after QEMU started, median of %d runs", sr.Seconds, slices.Max(slices.Collect(maps.Values(sr.Boots))))}
	for _, v := range sr.Variants {
		heads = append(heads, slowNames[v])
	}
	fmt.Fprintf(bw, "\n| %s |\n|%s\n", strings.Join(heads, " | "), strings.Repeat(" --- |", len(heads)))
	for _, r := range sr.Rows {
		cells := []string{r.Name}
		for _, v := range sr.Variants {
			cells = append(cells, fmt.Sprintf("%.3f s", r.Medians[v]))
		}
		fmt.Fprintf(bw, "| %s |\n", strings.Join(cells, " | "))
	}
	cells := []string{"test driver bound before the root was mounted"}
	for _, v := range sr.Variants {
		cells = append(cells, fmt.Sprintf("%d of %d boots", sr.BoundBefore[v], sr.Boots[v]))
	}
	fmt.Fprintf(bw, "| %s |\n\n", strings.Join(cells, " | "))
	var bound, init []string
	for _, r := range sr.Rounds {
		bound = append(bound, fmt.Sprintf("%+.3f", r.EarlyMinusBnd))
		init = append(init, fmt.Sprintf("%+.3f", r.EarlyMinusInit))
	}
	fmt.Fprintf(bw, "Early decision, test driver bound before the root was mounted in every boot: %s. Early not slower than after the root (driver bound, every round): %s; early − after root, round by round: driver bound %s s; root mounted → real init %s s.\n",
		yesNo(sr.EarlyBeforeRoot), yesNo(sr.EarlyNotSlower), strings.Join(bound, ", "), strings.Join(init, ", "))
	fmt.Fprintf(bw, "Slow-root boots that hung under TCG and were run again: Debian %d, kpreload %d, early %d.\n\n", sr.Hung[debian], sr.Hung[kpreload], sr.Hung[kpreloadEarly])
	fmt.Fprintf(bw, "Slow-root samples, in run order:\n\n| metric | %s |\n|%s\n", strings.Join(heads[1:], " | "), strings.Repeat(" --- |", len(heads)))
	for _, r := range sr.Rows {
		cells := []string{r.Name}
		for _, v := range sr.Variants {
			cells = append(cells, list(r.Samples[v]))
		}
		fmt.Fprintf(bw, "| %s |\n", strings.Join(cells, " | "))
	}
	return bw.Flush()
}

// yesNo is a verdict in words.
func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}
