package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/kpreload/kpreload/report"
)

// stepBoot is one boot of scripts/nvidia-breakdown.sh, one JSON line of its
// samples file: the times of the path's steps, seconds since kernel start.
type stepBoot struct {
	Variant     string       `json:"variant"`
	Run         int          `json:"run"`
	InitStart   float64      `json:"init_start"`   // "Run /init as init process"
	Main        float64      `json:"main"`         // /init's Go main (the report's init_start)
	RootMounted float64      `json:"root_mounted"` // the report's root.mounted
	Decision    float64      `json:"decision"`     // the driver decision (selection.t)
	Loaded      float64      `json:"loaded"`       // the module's own init ran (the marker line)
	RealInit    float64      `json:"real_init"`    // the root's init started
	Modules     []stepModule `json:"modules"`
}

// stepModule is one driver module's insert: /init's side from its report
// entry, the kernel's from initcall_debug's lines.
type stepModule struct {
	Name       string  `json:"name"`
	Decompress string  `json:"decompress,omitempty"`
	Start      float64 `json:"start"`
	Read       float64 `json:"read"`
	Digest     float64 `json:"digest"`
	Unpack     float64 `json:"unpack"`
	Called     float64 `json:"called"`
	InitCalled float64 `json:"init_called"` // initcall_debug's "calling" line
	InitTime   float64 `json:"init_time"`   // its "returned ... after N usecs", in seconds
	End        float64 `json:"end"`
}

var (
	// callingLine and returnedLine are initcall_debug's lines for a module's init.
	callingLine  = regexp.MustCompile(`\[\s*(\d+\.\d+)\] calling  \S+ \[(\w+)\] @ \d+`)
	returnedLine = regexp.MustCompile(`\] initcall \S+ \[(\w+)\] returned -?\d+ after (\d+) usecs`)
)

// runBreakdown turns one boot (kpreload boot --json and its console, booted
// with initcall_debug) into a stepBoot line on stdout.
func runBreakdown(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("breakdown", flag.ContinueOnError)
	variant := fs.String("variant", "", "the variant's name")
	runN := fs.Int("run", 0, "run number")
	bootFile := fs.String("boot", "", "output of kpreload boot --json")
	consoleFile := fs.String("console", "", "the boot's console log")
	prefix := fs.String("modules", "", "the driver's modules: names starting with this")
	marker := fs.String("marker", "", "the kernel log line the driver's init prints (its time is the loaded row)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *variant == "" || *prefix == "" || *marker == "" {
		return errors.New("breakdown: -variant, -modules and -marker are required")
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
	s, err := stepsOf(&b, console, *prefix, *marker)
	if err != nil {
		return fmt.Errorf("%s boot %d (console %s): %w", *variant, *runN, *consoleFile, err)
	}
	s.Variant, s.Run = *variant, *runN
	return json.NewEncoder(stdout).Encode(s)
}

// stepsOf reads a boot's steps; every one must be there.
func stepsOf(b *bootResult, console []byte, prefix, marker string) (stepBoot, error) {
	var s stepBoot
	switch {
	case b.Report == nil:
		return s, errors.New("no kpreload boot report")
	case len(b.Report.Errors) > 0:
		return s, fmt.Errorf("kpreload report errors: %q", b.Report.Errors)
	case b.RootInit == nil:
		return s, errors.New("the root disk's /sbin/init never reported")
	case b.Report.Selection == nil:
		return s, errors.New("no driver decision in the report")
	}
	var err error
	if s.InitStart, err = consoleTime(console, initLine); err != nil {
		return s, fmt.Errorf("initramfs /init start: %w", err)
	}
	if s.Loaded, err = consoleTime(console, regexp.MustCompile(`\[\s*(\d+\.\d+)\] `+regexp.QuoteMeta(marker))); err != nil {
		return s, fmt.Errorf("the driver's init: %w", err)
	}
	s.Main, s.RootMounted, s.Decision, s.RealInit = b.Report.InitStart, b.Report.Root.Mounted, b.Report.Selection.Time, b.RootInit.Start
	for _, m := range b.Report.Modules {
		if !strings.HasPrefix(m.Name, prefix) || m.Called == 0 {
			continue
		}
		sm, err := moduleSteps(m, console)
		if err != nil {
			return s, err
		}
		s.Modules = append(s.Modules, sm)
	}
	if len(s.Modules) == 0 {
		return s, fmt.Errorf("no module named %s* was inserted", prefix)
	}
	return s, nil
}

// moduleSteps joins a module's report entry with its initcall_debug lines.
func moduleSteps(m report.Module, console []byte) (stepModule, error) {
	sm := stepModule{Name: m.Name, Decompress: m.Decompress, Start: m.Start, Read: m.ReadTime, Digest: m.DigestTime,
		Unpack: m.DecompressTime, Called: m.Called, End: m.End}
	for _, c := range callingLine.FindAllSubmatch(console, -1) {
		if string(c[2]) == m.Name {
			sm.InitCalled, _ = strconv.ParseFloat(string(c[1]), 64)
		}
	}
	for _, r := range returnedLine.FindAllSubmatch(console, -1) {
		if string(r[1]) == m.Name {
			us, _ := strconv.ParseFloat(string(r[2]), 64)
			sm.InitTime = us / 1e6
		}
	}
	if sm.InitCalled == 0 || sm.InitTime == 0 {
		return sm, fmt.Errorf("module %s: no initcall_debug lines for its init (boot with initcall_debug loglevel=8)", m.Name)
	}
	return sm, nil
}

// stepRow is one row of the breakdown: a name and how to take it from a boot.
type stepRow struct {
	name string
	get  func(stepBoot) float64
}

// stepRows are the path's steps in order; the module rows repeat per module.
func stepRows(mods []string) []stepRow {
	rows := []stepRow{
		{"kernel start → Run /init (the kernel's boot, initramfs unpacked)", func(s stepBoot) float64 { return s.InitStart }},
		{"Run /init → Go main", func(s stepBoot) float64 { return s.Main - s.InitStart }},
		{"Go main → root mounted", func(s stepBoot) float64 { return s.RootMounted - s.Main }},
		{"Go main → driver decision", func(s stepBoot) float64 { return s.Decision - s.Main }},
	}
	for i, name := range mods {
		m := func(s stepBoot) stepModule {
			if i < len(s.Modules) {
				return s.Modules[i]
			}
			return stepModule{}
		}
		rows = append(rows,
			stepRow{name + ": decision → insert starts (dependencies, the loader's turn)", func(s stepBoot) float64 { return m(s).Start - s.Decision }},
			stepRow{name + ": read the file (digest pass)", func(s stepBoot) float64 { return m(s).Read }},
			stepRow{name + ": sha256 of it (digest pass)", func(s stepBoot) float64 { return m(s).Digest }},
			stepRow{name + ": decompression in /init", func(s stepBoot) float64 { return m(s).Unpack }},
			stepRow{name + ": the rest of /init's checks before the call", func(s stepBoot) float64 {
				x := m(s)
				return x.Called - x.Start - x.Read - x.Digest - x.Unpack
			}},
			stepRow{name + ": the call → its init starts (the kernel's load_module: copy, decompression, signature, relocation)", func(s stepBoot) float64 { return m(s).InitCalled - m(s).Called }},
			stepRow{name + ": the module's own init (initcall_debug)", func(s stepBoot) float64 { return m(s).InitTime }},
			stepRow{name + ": its init returned → the call returned in /init", func(s stepBoot) float64 { return m(s).End - m(s).InitCalled - m(s).InitTime }},
		)
	}
	return append(rows,
		stepRow{"kernel start → the driver's init ran (its marker line)", func(s stepBoot) float64 { return s.Loaded }},
		stepRow{"kernel start → real init", func(s stepBoot) float64 { return s.RealInit }},
	)
}

// runBreakdownTable prints the samples' medians, a column per variant.
func runBreakdownTable(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("breakdown-table", flag.ContinueOnError)
	samplesFile := fs.String("samples", "", "samples file (JSON lines of breakdown)")
	note := fs.String("note", "", "a line printed under the table (how the boots ran)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	boots, err := readSteps(*samplesFile)
	if err != nil {
		return err
	}
	return writeBreakdown(stdout, boots, *note)
}

// readSteps reads a breakdown samples file.
func readSteps(path string) ([]stepBoot, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("samples: %w", err)
	}
	defer f.Close()
	var out []stepBoot
	dec := json.NewDecoder(f)
	for {
		var s stepBoot
		if err := dec.Decode(&s); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("samples %s: %w", path, err)
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("samples %s: no boots", path)
	}
	return out, nil
}

// writeBreakdown prints the median of each step per variant (variants in
// their first boot's order), then every sample.
func writeBreakdown(w io.Writer, boots []stepBoot, note string) error {
	var variants []string
	by := map[string][]stepBoot{}
	for _, s := range boots {
		if by[s.Variant] == nil {
			variants = append(variants, s.Variant)
		}
		by[s.Variant] = append(by[s.Variant], s)
	}
	var mods []string
	for _, m := range boots[0].Modules {
		mods = append(mods, m.Name)
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "| step (medians, s) | %s |\n|%s\n", strings.Join(variants, " | "), strings.Repeat(" --- |", 1)+strings.Repeat(" ---: |", len(variants)))
	for _, r := range stepRows(mods) {
		fmt.Fprintf(bw, "| %s |", r.name)
		for _, v := range variants {
			fmt.Fprintf(bw, " %.3f |", median(stepValues(by[v], r)))
		}
		fmt.Fprintln(bw)
	}
	if note != "" {
		fmt.Fprintf(bw, "\n%s\n", note)
	}
	fmt.Fprintf(bw, "\nSamples, in run order:\n\n| step | variant | samples |\n| --- | --- | --- |\n")
	for _, r := range stepRows(mods) {
		for _, v := range variants {
			fmt.Fprintf(bw, "| %s | %s | %s |\n", r.name, v, list(stepValues(by[v], r)))
		}
	}
	return bw.Flush()
}

// stepValues is one row's value in each boot.
func stepValues(boots []stepBoot, r stepRow) []float64 {
	out := make([]float64, len(boots))
	for i, s := range boots {
		out[i] = r.get(s)
	}
	return out
}
