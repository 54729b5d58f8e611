package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/kpreload/kpreload/report/svg"
	"github.com/kpreload/kpreload/report/timeline"
)

// bootFiles names one boot to draw: its variant and its files.
type bootFiles struct {
	variant, boot, console string
}

// runSVG draws the boots of one round (Debian's and kpreload's) on one time
// axis: svg -o FILE -kernel K -round I -boot VARIANT=BOOT.json,CONSOLE ...
func runSVG(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("svg", flag.ContinueOnError)
	out := fs.String("o", "", "the SVG file to write")
	kernel := fs.String("kernel", "", "the kernel release that must have booted")
	round := fs.Int("round", 0, "the round the boots belong to")
	var boots []bootFiles
	fs.Func("boot", "VARIANT=BOOT.json,CONSOLE: one boot of the round (repeatable)", func(s string) error {
		v, files, ok := strings.Cut(s, "=")
		b, c, ok2 := strings.Cut(files, ",")
		if !ok || !ok2 || v == "" || b == "" || c == "" {
			return fmt.Errorf("%q: want VARIANT=BOOT.json,CONSOLE", s)
		}
		boots = append(boots, bootFiles{v, b, c})
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || len(boots) == 0 {
		return fmt.Errorf("svg: -o and at least one -boot are required")
	}
	var lanes []*timeline.Boot
	for _, bf := range boots {
		l, err := bootLane(bf, *kernel)
		if err != nil {
			return err
		}
		lanes = append(lanes, l)
	}
	title := fmt.Sprintf("boot of %s, round %d, under QEMU TCG: Debian's initramfs-tools and kpreload", *kernel, *round)
	if err := svg.WriteFile(*out, title, lanes); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %d boots of round %d\n", *out, len(lanes), *round)
	return nil
}

// bootLane reads one boot's files, checks it as a sample is checked, and
// makes its story: the console's milestones for every variant (the kernel
// running /init, the real init, which bound the kernel's and the
// initramfs's bands), and kpreload's report (its steps, module loads and
// decision) where there is one.
func bootLane(bf bootFiles, kernel string) (*timeline.Boot, error) {
	raw, err := os.ReadFile(bf.boot)
	if err != nil {
		return nil, fmt.Errorf("read boot result: %w", err)
	}
	var b bootResult
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, fmt.Errorf("decode boot result %s: %w", bf.boot, err)
	}
	console, err := os.ReadFile(bf.console)
	if err != nil {
		return nil, fmt.Errorf("read console log: %w", err)
	}
	s, err := checkBoot(bf.variant, kernel, &b, console)
	if err != nil {
		return nil, fmt.Errorf("%s boot (console %s): %w", bf.variant, bf.console, err)
	}
	return &timeline.Boot{Name: bf.variant, Report: b.Report, RunInit: s.InitStart, RealInit: s.RealInit,
		Marks: []timeline.Mark{
			{Time: s.RootReady, Label: "root disk seen (vda)"},
			{Time: s.EduBound, Label: "kpreload_edu bound"},
		}}, nil
}
