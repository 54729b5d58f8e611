// Command benchboot is the parsing and reporting half of scripts/bench-boot.sh: it
// checks one `kpreload boot --json` result and its console log and turns them into a
// sample, and it turns the samples of a whole run into a markdown table or JSON.
//
//	benchboot sample -variant debian -run 1 -kernel KVER -boot boot.json -console console.log
//	benchboot report [-json] -samples samples.jsonl -kernel KVER -runs 3 ...
//	benchboot ab [-json] -samples samples.jsonl -a OLD -b NEW
//	benchboot breakdown -variant V -run N -boot boot.json -console console.log -modules nvidia -marker 'NVRM: ...'
//	benchboot breakdown-table -samples steps.jsonl
//
// A boot that did not reach the root disk's /sbin/init, or in which the test driver
// was not bound to QEMU's edu device before it, is refused: a benchmark of a broken
// boot is worthless.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/kpreload/kpreload/report"
)

// errHung marks a boot that never finished (QEMU killed at the timeout); sample exits
// with status 3 for it, so the script can tell a hang from a broken boot.
var errHung = errors.New("the boot hung")

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "benchboot: %v\n", err)
		if errors.Is(err, errHung) {
			os.Exit(3)
		}
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: benchboot sample|report|ab|svg|breakdown|breakdown-table [flags]")
	}
	switch args[0] {
	case "sample":
		return runSample(args[1:], stdout, stderr)
	case "report":
		return runReport(args[1:], stdout)
	case "ab":
		return runAB(args[1:], stdout)
	case "svg":
		return runSVG(args[1:], stdout)
	case "breakdown":
		return runBreakdown(args[1:], stdout)
	case "breakdown-table":
		return runBreakdownTable(args[1:], stdout)
	}
	return fmt.Errorf("unknown command %q (want sample, report, ab, svg, breakdown or breakdown-table)", args[0])
}

// Variant names, in table column order.
const (
	debian   = "debian"
	kpreload = "kpreload"
	// kpreloadEarly is kpreload's initramfs with its index marked complete
	// (kpreload initramfs --complete): /init decides and loads the driver
	// while it finds the root. Optional: runs without it report two columns.
	kpreloadEarly = "kpreload-early"
)

// Sample is one measured boot or build, one JSON line in the samples file.
type Sample struct {
	Kind    string `json:"kind"` // "boot", "build", or "hung" (a boot that timed out and was re-run)
	Variant string `json:"variant"`
	Run     int    `json:"run"`
	// Label names the build of kpreload a boot ran (ab-init.sh's two), "" in bench-boot.sh.
	Label string `json:"label,omitempty"`
	// Main is when kpreload's /init reached Go's main (its report's init_start), 0 for Debian.
	Main float64 `json:"main,omitempty"`
	// Boot times, seconds since kernel start.
	InitStart float64 `json:"init_start,omitempty"` // "Run /init as init process"
	RootReady float64 `json:"root_ready,omitempty"` // virtio_blk's "[vda]" line
	EduBound  float64 `json:"edu_bound,omitempty"`  // kpreload_edu's "bound" line
	RealInit  float64 `json:"real_init,omitempty"`  // rootinit's start
	// RootMounted is the kernel's "EXT4-fs (vda): mounted filesystem" line:
	// the root's first mount, whoever's initramfs made it.
	RootMounted float64 `json:"root_mounted,omitempty"`
	// SlowRoot is how long after QEMU started the root disk was to be
	// plugged in (kpreload boot --root-late), 0 for a root there from the
	// start; RootPlugged is when it was, as kpreload boot measured it.
	SlowRoot    float64 `json:"slow_root,omitempty"`
	RootPlugged float64 `json:"root_plugged,omitempty"`
	// Wall is the boot's or the build's wall-clock time in seconds.
	Wall float64 `json:"wall"`
	// Bytes is the initramfs size (builds only).
	Bytes int64 `json:"bytes,omitempty"`
}

// bootResult is the part of `kpreload boot --json` the benchmark reads.
type bootResult struct {
	Report      *report.Report   `json:"report"`
	RootInit    *report.RootInit `json:"rootinit"`
	WallSeconds float64          `json:"wall_seconds"`
	RootPlugged float64          `json:"root_plugged_seconds"`
	Accel       string           `json:"accel"`
	Panicked    bool             `json:"panicked"`
	TimedOut    bool             `json:"timed_out"`
	ExitCode    int              `json:"exit_code"`
	Error       string           `json:"error"`
}

const (
	eduID    = "0x010000ed"
	rootDisk = "/dev/vda"
)

var (
	// vdaLine is virtio_blk announcing the root disk, anywhere in a console line
	// (userspace output on the shared console can precede it).
	vdaLine = regexp.MustCompile(`\[\s*(\d+\.\d+)\] virtio_blk virtio\d+: \[vda\] `)
	// mountedLine is ext4's first mount of the root disk.
	mountedLine = regexp.MustCompile(`\[\s*(\d+\.\d+)\] EXT4-fs \(vda\): mounted filesystem`)
	// initLine is the kernel starting the initramfs's /init.
	initLine = regexp.MustCompile(`\[\s*(\d+\.\d+)\] Run /init as init process`)
)

func runSample(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sample", flag.ContinueOnError)
	variant := fs.String("variant", "", "debian or kpreload")
	runN := fs.Int("run", 0, "run number")
	kernel := fs.String("kernel", "", "the kernel release that must have booted")
	bootFile := fs.String("boot", "", "output of kpreload boot --json")
	label := fs.String("label", "", "the build of kpreload the boot ran (ab-init.sh)")
	consoleFile := fs.String("console", "", "the boot's console log")
	slowRoot := fs.Float64("slow-root", 0, "seconds after QEMU's start the root disk was plugged in (boot --root-late), 0 for none")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *variant != debian && *variant != kpreload && *variant != kpreloadEarly {
		return fmt.Errorf("-variant %q: want %s, %s or %s", *variant, debian, kpreload, kpreloadEarly)
	}
	raw, err := os.ReadFile(*bootFile)
	if err != nil {
		return fmt.Errorf("read boot result: %w", err)
	}
	var b bootResult
	if err := json.Unmarshal(raw, &b); err != nil {
		return fmt.Errorf("decode boot result %s: %w", *bootFile, err)
	}
	console, err := os.ReadFile(*consoleFile)
	if err != nil {
		return fmt.Errorf("read console log: %w", err)
	}
	s, err := checkBoot(*variant, *kernel, &b, console)
	if err != nil {
		return fmt.Errorf("%s boot %d is broken (console %s): %w", *variant, *runN, *consoleFile, err)
	}
	s.Run, s.Label = *runN, *label
	if err := s.slowRoot(*slowRoot, b.RootPlugged); err != nil {
		return fmt.Errorf("%s boot %d (console %s): %w", *variant, *runN, *consoleFile, err)
	}
	fmt.Fprintf(stderr, "    %s boot %d: /init %.3f s, vda ready %.3f s, root mounted %.3f s, edu bound %.3f s, real init %.2f s (wall %.1f s)\n",
		s.Variant, s.Run, s.InitStart, s.RootReady, s.RootMounted, s.EduBound, s.RealInit, s.Wall)
	return json.NewEncoder(stdout).Encode(s)
}

// checkBoot verifies that a boot reached the root disk's init with the test driver
// bound before it, and extracts the sample's times.
func checkBoot(variant, kernel string, b *bootResult, console []byte) (Sample, error) {
	s := Sample{Kind: "boot", Variant: variant, Wall: b.WallSeconds}
	switch {
	case b.Panicked:
		return s, errors.New("the kernel panicked")
	case b.TimedOut:
		if bytes.Contains(console, []byte("rcu_preempt detected stalls")) {
			return s, fmt.Errorf("%w: timed out after RCU stall reports (a vCPU stopped taking interrupts)", errHung)
		}
		return s, fmt.Errorf("%w: timed out", errHung)
	case b.ExitCode != 0:
		return s, fmt.Errorf("QEMU exited with status %d: %s", b.ExitCode, b.Error)
	case b.Accel != "tcg":
		return s, fmt.Errorf("ran under %q, want tcg", b.Accel)
	}
	// Debian's initramfs writes no kpreload report; kpreload's must.
	if variant == kpreload || variant == kpreloadEarly {
		if b.Error != "" {
			return s, errors.New(b.Error)
		}
		if b.Report == nil {
			return s, errors.New("no kpreload boot report")
		}
		if len(b.Report.Errors) > 0 {
			return s, fmt.Errorf("kpreload report errors: %q", b.Report.Errors)
		}
		s.Main = b.Report.InitStart
	} else if b.Report != nil {
		return s, errors.New("a kpreload boot report came back from Debian's initramfs: wrong initrd?")
	} else if b.Error != "" && !strings.Contains(b.Error, "no boot report came back") {
		return s, errors.New(b.Error)
	}
	ri := b.RootInit
	if ri == nil {
		return s, errors.New("the root disk's /sbin/init never reported")
	}
	if ri.PID != 1 || ri.Root.BlockDevice != rootDisk || ri.Root.FSType != "ext4" {
		return s, fmt.Errorf("root init ran as pid %d on %q (%s), want pid 1 on %s ext4", ri.PID, ri.Root.BlockDevice, ri.Root.FSType, rootDisk)
	}
	if kernel != "" && ri.Kernel != kernel {
		return s, fmt.Errorf("kernel %q booted, want %q", ri.Kernel, kernel)
	}
	bound := false
	for _, d := range ri.PCI {
		if d.ID() == "1234:11e8" && d.Driver == "kpreload_edu" && d.EduID == eduID {
			bound = true
		}
	}
	if !bound {
		return s, fmt.Errorf("edu (1234:11e8) is not bound to kpreload_edu with edu_id %s: %+v", eduID, ri.PCI)
	}
	s.EduBound = -1
	for _, l := range ri.Kmsg {
		if strings.HasPrefix(l.Text, "kpreload_edu ") && strings.Contains(l.Text, ": bound, id "+eduID) {
			s.EduBound = l.Time
			break
		}
	}
	if s.EduBound < 0 {
		return s, errors.New("no \"kpreload_edu ...: bound\" line in the kernel log")
	}
	s.RealInit = ri.Start
	var err error
	if s.InitStart, err = consoleTime(console, initLine); err != nil {
		return s, fmt.Errorf("initramfs /init start: %w", err)
	}
	if s.RootReady, err = consoleTime(console, vdaLine); err != nil {
		return s, fmt.Errorf("root disk driver: %w", err)
	}
	if s.RootMounted, err = consoleTime(console, mountedLine); err != nil {
		return s, fmt.Errorf("root mount: %w", err)
	}
	if s.EduBound > s.RealInit || s.RootReady > s.RealInit || s.RootMounted > s.RealInit || s.InitStart > s.RealInit {
		return s, fmt.Errorf("times out of order: /init %.3f, vda %.3f, root mounted %.3f, edu bound %.3f, real init %.2f", s.InitStart, s.RootReady, s.RootMounted, s.EduBound, s.RealInit)
	}
	return s, nil
}

// consoleTime returns the printk time of the first console line re matches.
func consoleTime(console []byte, re *regexp.Regexp) (float64, error) {
	m := re.FindSubmatch(console)
	if m == nil {
		return 0, fmt.Errorf("no console line matches %q", re)
	}
	t, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		return 0, fmt.Errorf("printk time %q: %w", m[1], err)
	}
	return t, nil
}

// median returns the median of xs (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Row is one line of the result table.
type Row struct {
	Name string `json:"name"`
	Unit string `json:"unit"`
	// Debian and Kpreload are the medians; the samples are in run order.
	Debian          float64   `json:"debian"`
	Kpreload        float64   `json:"kpreload"`
	DebianSamples   []float64 `json:"debian_samples"`
	KpreloadSamples []float64 `json:"kpreload_samples"`
	// Ratio is Kpreload / Debian.
	Ratio float64 `json:"ratio"`
	// Early, EarlySamples and EarlyRatio are the kpreload-early variant's,
	// when the run had one.
	Early        float64   `json:"early,omitempty"`
	EarlySamples []float64 `json:"early_samples,omitempty"`
	EarlyRatio   float64   `json:"early_ratio,omitempty"`
	// Rounds are the ratios of each round (run) taken alone, kpreload's boot
	// over Debian's of the same round, whose boots ran back to back; RoundMedian
	// is their median. The host's noise moves a round's boots together, so
	// these show how far it moved the ratio; the verdict stays on Ratio.
	Rounds      []float64 `json:"round_ratios,omitempty"`
	RoundMedian float64   `json:"round_ratio_median,omitempty"`
	// EarlyRounds and EarlyRoundMedian are the same for the early variant.
	EarlyRounds      []float64 `json:"early_round_ratios,omitempty"`
	EarlyRoundMedian float64   `json:"early_round_ratio_median,omitempty"`
	// EarlyTarget is the goal for EarlyRatio, empty when there is none.
	EarlyTarget string `json:"early_target,omitempty"`
	EarlyMet    *bool  `json:"early_met,omitempty"`
	// Target is the goal for Ratio ("<= 0.5", "< 1"), empty when there is none.
	Target string `json:"target,omitempty"`
	Met    *bool  `json:"met,omitempty"`
}

// Machine is what the numbers were measured on.
type Machine struct {
	Nproc       int     `json:"nproc"`
	Accel       string  `json:"accel"`
	Kernel      string  `json:"kernel"`
	QEMU        string  `json:"qemu"`
	GuestCPUs   int     `json:"guest_cpus"`
	GuestMemMiB int     `json:"guest_memory_mib"`
	Runs        int     `json:"runs"`
	LoadStart   string  `json:"load_average_start"`
	LoadEnd     string  `json:"load_average_end"`
	Mkinitramfs string  `json:"mkinitramfs"`
	Kpreload    string  `json:"kpreload"`
	Seconds     float64 `json:"total_seconds"`
	// Hung counts, per variant, the boots that timed out and were run again.
	Hung map[string]int `json:"hung_boots_rerun"`
}

// Result is the whole benchmark, as --json prints it.
type Result struct {
	Machine   Machine `json:"machine"`
	Rows      []Row   `json:"rows"`
	TargetsOK bool    `json:"targets_met"`
	// SlowRoot is the slow-root variants' table, nil when none ran.
	SlowRoot *SlowRoot `json:"slow_root,omitempty"`
}

func runReport(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	var m Machine
	samplesFile := fs.String("samples", "", "samples file (JSON lines)")
	asJSON := fs.Bool("json", false, "print JSON instead of markdown")
	fs.IntVar(&m.Nproc, "nproc", 0, "host CPUs")
	fs.StringVar(&m.Accel, "accel", "tcg", "QEMU accelerator")
	fs.StringVar(&m.Kernel, "kernel", "", "kernel release")
	fs.StringVar(&m.QEMU, "qemu", "", "QEMU version")
	fs.IntVar(&m.GuestCPUs, "guest-cpus", 0, "guest vCPUs")
	fs.IntVar(&m.GuestMemMiB, "guest-memory", 0, "guest memory, MiB")
	fs.IntVar(&m.Runs, "runs", 0, "runs per variant")
	fs.StringVar(&m.LoadStart, "load-start", "", "load average when the run started")
	fs.StringVar(&m.LoadEnd, "load-end", "", "load average when the run ended")
	fs.StringVar(&m.Mkinitramfs, "mkinitramfs", "", "initramfs-tools version and settings")
	fs.StringVar(&m.Kpreload, "kpreload-version", "", "kpreload version")
	fs.Float64Var(&m.Seconds, "seconds", 0, "total run time of the benchmark")
	if err := fs.Parse(args); err != nil {
		return err
	}
	samples, err := readSamples(*samplesFile)
	if err != nil {
		return err
	}
	main, slow := splitSlowRoot(samples)
	res, err := summarize(m, main)
	if err != nil {
		return err
	}
	if res.SlowRoot, err = summarizeSlowRoot(slow); err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, res)
	}
	if err := writeMarkdown(stdout, res); err != nil {
		return err
	}
	return writeSlowRoot(stdout, res.SlowRoot)
}

// writeJSON prints v as indented JSON, what --json gives.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func readSamples(path string) ([]Sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open samples: %w", err)
	}
	defer f.Close()
	var out []Sample
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var s Sample
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read samples: %w", err)
	}
	return out, nil
}

// metric is how one row is taken from the samples.
type metric struct {
	name, unit, kind, target string
	// limit is the target's bound on the ratio; strict means < rather than <=.
	limit  float64
	strict bool
	// earlyTarget and earlyLimit are the goal for the early variant's ratio.
	earlyTarget string
	earlyLimit  float64
	get         func(Sample) float64
}

var metrics = []metric{
	{name: "kernel start → initramfs /init runs", unit: "s", kind: "boot", get: func(s Sample) float64 { return s.InitStart }},
	{name: "kernel start → root disk driver ready (virtio_blk [vda])", unit: "s", kind: "boot", get: func(s Sample) float64 { return s.RootReady }},
	{name: "kernel start → test driver bound (kpreload_edu)", unit: "s", kind: "boot", target: "≤ 0.5", limit: 0.5, earlyTarget: "≤ 0.45", earlyLimit: 0.45, get: func(s Sample) float64 { return s.EduBound }},
	{name: "initramfs /init → test driver bound (the initramfs's own part)", unit: "s", kind: "boot", get: func(s Sample) float64 { return s.EduBound - s.InitStart }},
	{name: "kernel start → real init runs (/sbin/init)", unit: "s", kind: "boot", target: "≤ 0.5", limit: 0.5, get: func(s Sample) float64 { return s.RealInit }},
	{name: "boot wall clock (QEMU start → power off)", unit: "s", kind: "boot", get: func(s Sample) float64 { return s.Wall }},
	{name: "initramfs build time (wall clock)", unit: "s", kind: "build", target: "≤ 0.1", limit: 0.1, get: func(s Sample) float64 { return s.Wall }},
	{name: "initramfs size", unit: "MB", kind: "build", target: "< 1", limit: 1, strict: true, get: func(s Sample) float64 { return float64(s.Bytes) / 1e6 }},
}

// summarize computes every row; both variants need the same, non-zero number of samples.
func summarize(m Machine, samples []Sample) (*Result, error) {
	res := &Result{Machine: m, TargetsOK: true}
	res.Machine.Hung = map[string]int{debian: 0, kpreload: 0, kpreloadEarly: 0}
	for _, s := range samples {
		if s.Kind == "hung" {
			res.Machine.Hung[s.Variant]++
		}
	}
	for _, mt := range metrics {
		r := Row{Name: mt.name, Unit: mt.unit, Target: mt.target}
		byRun := map[string]map[int]float64{debian: {}, kpreload: {}, kpreloadEarly: {}}
		for _, s := range samples {
			if s.Kind != mt.kind {
				continue
			}
			switch s.Variant {
			case debian:
				r.DebianSamples = append(r.DebianSamples, mt.get(s))
			case kpreload:
				r.KpreloadSamples = append(r.KpreloadSamples, mt.get(s))
			case kpreloadEarly:
				r.EarlySamples = append(r.EarlySamples, mt.get(s))
			default:
				continue
			}
			byRun[s.Variant][s.Run] = mt.get(s)
		}
		if mt.kind == "boot" && (mt.target != "" || mt.earlyTarget != "") {
			r.Rounds = roundRatios(byRun[kpreload], byRun[debian])
			r.EarlyRounds = roundRatios(byRun[kpreloadEarly], byRun[debian])
			if len(r.Rounds) > 0 {
				r.RoundMedian = median(r.Rounds)
			}
			if len(r.EarlyRounds) > 0 {
				r.EarlyRoundMedian = median(r.EarlyRounds)
			}
		}
		if len(r.DebianSamples) == 0 || len(r.DebianSamples) != len(r.KpreloadSamples) {
			return nil, fmt.Errorf("%s: %d Debian samples and %d kpreload samples, want the same non-zero number",
				mt.name, len(r.DebianSamples), len(r.KpreloadSamples))
		}
		r.Debian, r.Kpreload = median(r.DebianSamples), median(r.KpreloadSamples)
		r.Ratio = r.Kpreload / r.Debian
		if len(r.EarlySamples) > 0 {
			if len(r.EarlySamples) != len(r.DebianSamples) {
				return nil, fmt.Errorf("%s: %d early samples and %d Debian samples, want the same number", mt.name, len(r.EarlySamples), len(r.DebianSamples))
			}
			r.Early = median(r.EarlySamples)
			r.EarlyRatio = r.Early / r.Debian
			if mt.earlyTarget != "" {
				met := r.EarlyRatio <= mt.earlyLimit
				r.EarlyTarget, r.EarlyMet = mt.earlyTarget, &met
				res.TargetsOK = res.TargetsOK && met
			}
		}
		if mt.target != "" {
			met := r.Ratio <= mt.limit
			if mt.strict {
				met = r.Ratio < mt.limit
			}
			r.Met = &met
			res.TargetsOK = res.TargetsOK && met
		}
		res.Rows = append(res.Rows, r)
	}
	return res, nil
}

// roundRatios returns num[run] / den[run] for every run both have, in run order.
func roundRatios(num, den map[int]float64) []float64 {
	runs := make([]int, 0, len(num))
	for run := range num {
		if d, ok := den[run]; ok && d != 0 {
			runs = append(runs, run)
		}
	}
	slices.Sort(runs)
	out := make([]float64, 0, len(runs))
	for _, run := range runs {
		out = append(out, num[run]/den[run])
	}
	return out
}

// spread renders round ratios as "median (min–max)".
func spread(med float64, xs []float64) string {
	if len(xs) == 0 {
		return ""
	}
	return fmt.Sprintf("%.3f (%.3f–%.3f)", med, slices.Min(xs), slices.Max(xs))
}

// value renders a median with its unit.
func value(r Row, v float64) string {
	if r.Unit == "MB" {
		return fmt.Sprintf("%.2f MB (%d B)", v, int64(math.Round(v*1e6)))
	}
	return fmt.Sprintf("%.3f s", v)
}

func writeMarkdown(w io.Writer, res *Result) error {
	if len(res.Rows) > 0 && len(res.Rows[0].EarlySamples) > 0 {
		return writeMarkdownEarly(w, res)
	}
	m := res.Machine
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "| kernel %s, QEMU %s, median of %d runs | Debian initramfs-tools | kpreload | kpreload / Debian | target (issue) |\n",
		m.Kernel, m.Accel, m.Runs)
	fmt.Fprintln(bw, "| --- | ---: | ---: | ---: | --- |")
	for _, r := range res.Rows {
		target := ""
		if r.Met != nil {
			target = r.Target + ": not met"
			if *r.Met {
				target = r.Target + ": met"
			}
		}
		fmt.Fprintf(bw, "| %s | %s | %s | %.3f | %s |\n", r.Name, value(r, r.Debian), value(r, r.Kpreload), r.Ratio, target)
	}
	fmt.Fprintln(bw)
	for _, r := range res.Rows {
		if len(r.Rounds) > 0 {
			fmt.Fprintf(bw, "Round by round, %s: %s: %s.\n", r.Name, spread(r.RoundMedian, r.Rounds), list(r.Rounds))
		}
	}
	fmt.Fprintf(bw, "Machine: %d host CPUs (nproc), QEMU %s with -accel %s, guest %d vCPUs and %d MiB, kernel %s; load average %s at the start, %s at the end; %d boots and %d builds of each variant, interleaved; whole run %.0f s.\n",
		m.Nproc, m.QEMU, m.Accel, m.GuestCPUs, m.GuestMemMiB, m.Kernel, m.LoadStart, m.LoadEnd, m.Runs, m.Runs, m.Seconds)
	fmt.Fprintf(bw, "Debian: %s. kpreload: %s.\n", m.Mkinitramfs, m.Kpreload)
	fmt.Fprintf(bw, "Boots that hung under TCG (timed out) and were run again: Debian %d, kpreload %d.\n", m.Hung[debian], m.Hung[kpreload])
	fmt.Fprintln(bw)
	fmt.Fprintln(bw, "Samples, in run order:")
	fmt.Fprintln(bw)
	fmt.Fprintln(bw, "| metric | Debian initramfs-tools | kpreload |")
	fmt.Fprintln(bw, "| --- | --- | --- |")
	for _, r := range res.Rows {
		fmt.Fprintf(bw, "| %s (%s) | %s | %s |\n", r.Name, r.Unit, list(r.DebianSamples), list(r.KpreloadSamples))
	}
	return bw.Flush()
}

func list(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x, 'f', 3, 64)
	}
	return strings.Join(parts, ", ")
}

// writeMarkdownEarly is writeMarkdown for a run with the early variant: both
// of kpreload's paths beside Debian's.
func writeMarkdownEarly(w io.Writer, res *Result) error {
	m := res.Machine
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "| kernel %s, QEMU %s, median of %d runs | Debian initramfs-tools | kpreload, decision after root | ratio | kpreload, early decision | ratio | target (issue) |\n",
		m.Kernel, m.Accel, m.Runs)
	fmt.Fprintln(bw, "| --- | ---: | ---: | ---: | ---: | ---: | --- |")
	verdict := func(target string, met *bool) string {
		if met == nil {
			return ""
		}
		if *met {
			return target + ": met"
		}
		return target + ": not met"
	}
	for _, r := range res.Rows {
		var targets []string
		if t := verdict(r.Target, r.Met); t != "" {
			targets = append(targets, "after root "+t)
		}
		if t := verdict(r.EarlyTarget, r.EarlyMet); t != "" {
			targets = append(targets, "early "+t)
		}
		fmt.Fprintf(bw, "| %s | %s | %s | %.3f | %s | %.3f | %s |\n", r.Name, value(r, r.Debian), value(r, r.Kpreload), r.Ratio, value(r, r.Early), r.EarlyRatio, strings.Join(targets, "; "))
	}
	fmt.Fprintln(bw)
	for _, r := range res.Rows {
		if len(r.Rounds) == 0 {
			continue
		}
		fmt.Fprintf(bw, "Round by round (each round's three boots back to back), %s: after the root %s: %s; early %s: %s.\n",
			r.Name, spread(r.RoundMedian, r.Rounds), list(r.Rounds), spread(r.EarlyRoundMedian, r.EarlyRounds), list(r.EarlyRounds))
	}
	fmt.Fprintf(bw, "Machine: %d host CPUs (nproc), QEMU %s with -accel %s, guest %d vCPUs and %d MiB, kernel %s; load average %s at the start, %s at the end; %d boots and %d builds of each variant, interleaved; whole run %.0f s.\n",
		m.Nproc, m.QEMU, m.Accel, m.GuestCPUs, m.GuestMemMiB, m.Kernel, m.LoadStart, m.LoadEnd, m.Runs, m.Runs, m.Seconds)
	fmt.Fprintf(bw, "Debian: %s. kpreload: %s; early: the same initramfs built with --complete.\n", m.Mkinitramfs, m.Kpreload)
	fmt.Fprintf(bw, "Boots that hung under TCG (timed out) and were run again: Debian %d, kpreload %d, early %d.\n", m.Hung[debian], m.Hung[kpreload], m.Hung[kpreloadEarly])
	fmt.Fprintln(bw)
	fmt.Fprintln(bw, "Samples, in run order:")
	fmt.Fprintln(bw)
	fmt.Fprintln(bw, "| metric | Debian initramfs-tools | kpreload, after root | kpreload, early |")
	fmt.Fprintln(bw, "| --- | --- | --- | --- |")
	for _, r := range res.Rows {
		fmt.Fprintf(bw, "| %s (%s) | %s | %s | %s |\n", r.Name, r.Unit, list(r.DebianSamples), list(r.KpreloadSamples), list(r.EarlySamples))
	}
	return bw.Flush()
}
