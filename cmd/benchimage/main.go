// Command benchimage is scripts/bench-image.sh's helper: it boots a disk image
// in QEMU with -device edu until systemd reaches its default target and
// prints the boot timeline in kernel time as one JSON line (boot), and turns
// the collected samples into the benchmark's markdown table (table).
//
//	benchimage boot -name kpreload -disk IMG.qcow2 [-firmware uefi|uefi-secure|bios] [-vars FILE]
//	    [-kernel K -initrd I -append A] [-drive FILE]... [-net] [-want-source S]
//	    [-instance FILE] [-human] [-timeout 480s] [-work DIR]
//
// With -instance the instance YAML goes to /init through QEMU fw_cfg; with
// -human the timeline and /init's report summary are printed for people
// (scripts/demo-image.sh) instead of the JSON line. -firmware uefi-secure
// boots OVMF's Secure Boot build with the variable store -vars (an image's
// <name>.ovmf-vars.fd) and requires the report to say Secure Boot was on;
// -drive attaches a read-only disk on virtio (a NoCloud seed); -net gives the
// guest QEMU's user-mode network (restrict=on); -want-source requires /init's
// driver request to have come from that source (seed, fw_cfg, image, ...).
//
//	benchimage table SAMPLES.jsonl
//
// The table has a section for each kind of sample present; "versus"
// samples (scripts/bench-image.sh --dib) compare the same image built by
// kpreload image build and by other tools, cold and warm.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/internal/none"
	"github.com/kpreload/kpreload/kmodcache/secureboot"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchimage:", err)
		os.Exit(1)
	}
}

// Sample is one measurement: a build (Seconds) or a boot (the timeline, in
// seconds of kernel time since the kernel started, and the wall time).
type Sample struct {
	Kind string `json:"kind"` // "build", "boot", "size", "install" or "versus"
	Name string `json:"name"`
	// Seconds is a build's wall time, or a size's bytes for kind "size".
	Seconds float64 `json:"seconds,omitempty"`
	Bytes   int64   `json:"bytes,omitempty"`
	// Bound is when the test driver logged its device bound.
	Bound float64 `json:"bound,omitempty"`
	// Init is when systemd, the root's /sbin/init, logged its start.
	Init float64 `json:"init,omitempty"`
	// Target is when systemd logged reaching its default target.
	Target float64 `json:"target,omitempty"`
	// Wall is QEMU's wall time to the default target (firmware included).
	Wall float64 `json:"wall,omitempty"`
	// Phase is a "versus" build's caches: "cold" or "warm".
	Phase string `json:"phase,omitempty"`
	// Allocated is a "versus" build's image's allocated bytes (Bytes its
	// apparent size).
	Allocated int64 `json:"allocated,omitempty"`
}

// versus is one tool's builds of the same image in the "versus" table.
type versus struct {
	cold, warm       []float64
	bytes, allocated int64
}

func run(args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("want a subcommand: boot or table")
	}
	switch args[0] {
	case "boot":
		return boot(args[1:], out)
	case "table":
		if len(args) != 2 {
			return errors.New("table: want one samples file")
		}
		return table(args[1], out)
	}
	return fmt.Errorf("unknown subcommand %q: want boot or table", args[0])
}

// defaultTarget matches systemd's message when it reaches the default target.
var defaultTarget = regexp.MustCompile(`Reached target .*(Multi-User System|Graphical Interface)`)

// bootOptions are boot's flags.
type bootOptions struct {
	name, disk, firmware, vars string
	kernel, initrd, appendArgs string
	wantSource, work, inst     string
	drives                     multiFlag
	network, human             bool
	timeout                    time.Duration
}

// parseBoot reads boot's flags from args.
func parseBoot(args []string) (*bootOptions, error) {
	o := &bootOptions{}
	fs := flag.NewFlagSet("boot", flag.ContinueOnError)
	fs.StringVar(&o.name, "name", "", "variant name")
	fs.StringVar(&o.disk, "disk", "", "disk image (booted through its firmware unless -kernel is given)")
	fs.StringVar(&o.firmware, "firmware", qemu.FirmwareUEFI, "the disk's firmware: uefi (OVMF), uefi-secure (OVMF with Secure Boot) or bios (SeaBIOS)")
	fs.StringVar(&o.vars, "vars", "", "the OVMF variable store to boot with a copy of (uefi-secure: the image's <name>.ovmf-vars.fd)")
	fs.Var(&o.drives, "drive", "a disk attached read-only on virtio after the root disk, such as a NoCloud seed (repeatable)")
	fs.BoolVar(&o.network, "net", false, "give the guest QEMU's user-mode network (restrict=on)")
	fs.StringVar(&o.wantSource, "want-source", "", "require /init's driver request to have come from this source (seed, fw_cfg, image, ...)")
	fs.StringVar(&o.kernel, "kernel", "", "boot this kernel directly (with -initrd and -append)")
	fs.StringVar(&o.initrd, "initrd", "", "initramfs for -kernel")
	fs.StringVar(&o.appendArgs, "append", "", "kernel command line additions for -kernel")
	fs.DurationVar(&o.timeout, "timeout", 480*time.Second, "give up after this long")
	fs.StringVar(&o.work, "work", "", "directory for the logs")
	fs.StringVar(&o.inst, "instance", "", "instance YAML passed to /init through fw_cfg ("+instance.FwCfgName+")")
	fs.BoolVar(&o.human, "human", false, "print the timeline and the report summary for people")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.name == "" || o.disk == "" {
		return nil, errors.New("boot: -name and -disk are required")
	}
	return o, nil
}

func boot(args []string, out io.Writer) error {
	o, err := parseBoot(args)
	if err != nil {
		return err
	}
	c, err := o.config()
	if err != nil {
		return err
	}
	res, err := (&qemu.Runner{WorkDir: o.work}).Run(context.Background(), c)
	if err != nil {
		return fmt.Errorf("boot %s: %w", o.name, err)
	}
	if err := o.check(res); err != nil {
		return err
	}
	s, bound, err := o.measure(res)
	if err != nil {
		return err
	}
	if !o.human {
		return json.NewEncoder(out).Encode(s)
	}
	printBoot(out, o.name, c, res, s, bound)
	return nil
}

// config is the QEMU configuration of the boot o asks for.
func (o *bootOptions) config() (qemu.Config, error) {
	c := qemu.Config{RootDisk: o.disk, Devices: []string{"edu"}, Until: defaultTarget, Timeout: o.timeout, Drives: o.drives}
	if o.kernel != "" {
		c.Kernel, c.Initramfs, c.Append = o.kernel, o.initrd, o.appendArgs
	} else {
		c.Firmware, c.OVMFVars = o.firmware, o.vars
	}
	if o.network {
		// qemu.Config makes its user-mode network (restrict=on: nothing
		// leaves the host) only for forwards: one to the guest's ssh port
		// from a free loopback port, which nothing uses.
		port, err := freePort()
		if err != nil {
			return c, err
		}
		c.HostForwards = []string{fmt.Sprintf("tcp:127.0.0.1:%d-:22", port)}
	}
	if o.inst != "" {
		c.FwCfg = map[string]string{instance.FwCfgName: o.inst}
	}
	return c, nil
}

// check returns an error when the boot res is not what o requires: the
// default target reached, Secure Boot on with uefi-secure, the driver
// request from o.wantSource.
func (o *bootOptions) check(res *qemu.Result) error {
	if !res.UntilMatched {
		return fmt.Errorf("boot %s: systemd did not reach its default target (console %s)", o.name, res.Console)
	}
	if o.firmware == qemu.FirmwareUEFISecure && o.kernel == "" && !o.human {
		if rep := res.Report; rep == nil || rep.SecureBoot == nil || rep.SecureBoot.SecureBoot != secureboot.Enabled {
			return fmt.Errorf("boot %s: the report does not say Secure Boot was on (console %s)", o.name, res.Console)
		}
	}
	if o.wantSource != "" {
		if rep := res.Report; rep == nil || rep.Selection == nil || rep.Selection.Source != o.wantSource {
			got := "no report"
			if rep != nil && rep.Selection != nil {
				got = rep.Selection.Source + " " + rep.Selection.Origin
			}
			return fmt.Errorf("boot %s: /init's driver request came from %s, want %s (console %s)", o.name, got, o.wantSource, res.Console)
		}
	}
	return nil
}

// measure reads the boot res's timeline into a sample, and the kernel line
// that says the test driver bound the edu device (nil when it never did,
// which only -human allows).
func (o *bootOptions) measure(res *qemu.Result) (Sample, *qemu.KernelLine, error) {
	s := Sample{Kind: "boot", Name: o.name, Wall: res.Duration.Seconds()}
	var bound *qemu.KernelLine
	if l, ok := qemu.Find(res.Kernel, "bound, id 0x010000ed"); ok {
		bound, s.Bound = &l, l.Time
	} else if !o.human {
		return s, nil, fmt.Errorf("boot %s: the test driver never bound the edu device (console %s)", o.name, res.Console)
	}
	console, err := os.ReadFile(res.Console)
	if err != nil {
		return s, nil, err
	}
	lines := printkLines(console)
	for _, l := range lines {
		if s.Target == 0 && defaultTarget.MatchString(l.Text) {
			s.Target = l.Time
		}
	}
	if s.Target == 0 && !o.human {
		return s, nil, fmt.Errorf("boot %s: no kernel-timestamped default target line (boot with systemd.log_target=kmsg printk.devkmsg=on; console %s)", o.name, res.Console)
	}
	// /sbin/init's start, measured the same way for every initramfs: systemd's
	// first message (the kpreload report's switch_root time when it is missing).
	if l, ok := qemu.Find(lines, "running in system mode"); ok {
		s.Init = l.Time
	} else if res.Report != nil {
		s.Init = res.Report.SwitchRoot
	}
	return s, bound, nil
}

// printBoot writes the boot's timeline and /init's report summary for people.
func printBoot(out io.Writer, name string, c qemu.Config, res *qemu.Result, s Sample, bound *qemu.KernelLine) {
	how := "direct kernel boot"
	switch c.Firmware {
	case qemu.FirmwareUEFI:
		how = "UEFI through the image's bootloader"
	case qemu.FirmwareUEFISecure:
		how = "UEFI Secure Boot through the image's bootloader"
	case qemu.FirmwareBIOS:
		how = "BIOS through the image's bootloader"
	}
	fmt.Fprintf(out, "boot %s (%s, %s, QEMU ran %.1fs):\n", name, res.Accel, how, s.Wall)
	fmt.Fprintf(out, "  %7.2fs  kernel started\n", 0.0)
	if bound != nil {
		fmt.Fprintf(out, "  %7.2fs  kpreload_edu bound the edu device (%s)\n", s.Bound, strings.TrimSpace(bound.Text))
	} else {
		fmt.Fprintf(out, "     --     the edu device was not bound (see the report's selection below)\n")
	}
	if s.Init > 0 {
		fmt.Fprintf(out, "  %7.2fs  systemd (/sbin/init) started\n", s.Init)
	}
	if s.Target > 0 {
		fmt.Fprintf(out, "  %7.2fs  systemd reached its default target\n", s.Target)
	} else {
		fmt.Fprintf(out, "     --     systemd reached its default target (%q on the console; boot with systemd.log_target=kmsg for its kernel time)\n", res.UntilMatch)
	}
	if rep := res.Report; rep != nil {
		fmt.Fprintf(out, "report: %s\n", rep.Summary())
		if sel := rep.Selection; sel != nil {
			fmt.Fprintf(out, "driver request from %s %s; warnings: %s; errors: %s\n", sel.Source, sel.Origin, none.Or(strings.Join(sel.Warnings, "; ")), none.Or(strings.Join(sel.Errors, "; ")))
		}
	}
	fmt.Fprintf(out, "console log: %s\n", res.Console)
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// freePort returns a TCP port free on the host's loopback.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// printkLine matches a console line with a printk timestamp.
var printkLine = regexp.MustCompile(`^\[\s*(\d+\.\d+)\] (.*)$`)

// printkLines returns every timestamped kernel log line of the console (with
// systemd.log_target=kmsg, systemd's messages are among them).
func printkLines(console []byte) []qemu.KernelLine {
	var out []qemu.KernelLine
	for _, line := range strings.Split(string(console), "\n") {
		m := printkLine.FindStringSubmatch(strings.TrimRight(line, "\r"))
		if m == nil {
			continue
		}
		if t, err := strconv.ParseFloat(m[1], 64); err == nil {
			out = append(out, qemu.KernelLine{Time: t, Text: m[2]})
		}
	}
	return out
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// samples are a samples file's measurements by kind, each kind's names in
// the order they first came.
type samples struct {
	builds, installs                                        map[string][]float64
	sizes                                                   map[string]int64
	boots                                                   map[string]*bootSeries
	vs                                                      map[string]*versus
	buildOrder, installOrder, sizeOrder, bootOrder, vsOrder []string
}

// bootSeries are one variant's boots in the table.
type bootSeries struct{ bound, init, target, wall []float64 }

func table(path string, out io.Writer) error {
	ss, err := readSamples(path)
	if err != nil {
		return err
	}
	ss.write(out)
	return nil
}

// readSamples reads the samples file at path, one JSON Sample a line.
func readSamples(path string) (*samples, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ss := &samples{builds: map[string][]float64{}, installs: map[string][]float64{}, sizes: map[string]int64{},
		boots: map[string]*bootSeries{}, vs: map[string]*versus{}}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var s Sample
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if err := ss.add(s); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return ss, sc.Err()
}

// add files the sample s under its kind and name.
func (ss *samples) add(s Sample) error {
	switch s.Kind {
	case "build":
		if _, ok := ss.builds[s.Name]; !ok {
			ss.buildOrder = append(ss.buildOrder, s.Name)
		}
		ss.builds[s.Name] = append(ss.builds[s.Name], s.Seconds)
	case "install":
		if _, ok := ss.installs[s.Name]; !ok {
			ss.installOrder = append(ss.installOrder, s.Name)
		}
		ss.installs[s.Name] = append(ss.installs[s.Name], s.Seconds)
	case "size":
		if _, ok := ss.sizes[s.Name]; !ok {
			ss.sizeOrder = append(ss.sizeOrder, s.Name)
		}
		ss.sizes[s.Name] = s.Bytes
	case "versus":
		v := ss.vs[s.Name]
		if v == nil {
			v = &versus{}
			ss.vs[s.Name] = v
			ss.vsOrder = append(ss.vsOrder, s.Name)
		}
		switch s.Phase {
		case "cold":
			v.cold = append(v.cold, s.Seconds)
			v.bytes, v.allocated = s.Bytes, s.Allocated
		case "warm":
			v.warm = append(v.warm, s.Seconds)
		default:
			return fmt.Errorf("versus sample %q: phase %q, want cold or warm", s.Name, s.Phase)
		}
	case "boot":
		b := ss.boots[s.Name]
		if b == nil {
			b = &bootSeries{}
			ss.boots[s.Name] = b
			ss.bootOrder = append(ss.bootOrder, s.Name)
		}
		b.bound = append(b.bound, s.Bound)
		b.init = append(b.init, s.Init)
		b.target = append(b.target, s.Target)
		b.wall = append(b.wall, s.Wall)
	}
	return nil
}

// write writes the table's sections, one for each kind of sample present.
func (ss *samples) write(out io.Writer) {
	if len(ss.buildOrder) > 0 {
		fmt.Fprintln(out, "| packer build | runs | median s | each run s |")
		fmt.Fprintln(out, "| --- | ---: | ---: | --- |")
	}
	for _, n := range ss.buildOrder {
		fmt.Fprintf(out, "| %s | %d | %.1f | %s |\n", n, len(ss.builds[n]), median(ss.builds[n]), list(ss.builds[n]))
	}
	if len(ss.buildOrder) >= 2 {
		a, b := median(ss.builds[ss.buildOrder[0]]), median(ss.builds[ss.buildOrder[1]])
		if b > 0 {
			fmt.Fprintf(out, "\n%s / %s: %.1fx\n", ss.buildOrder[0], ss.buildOrder[1], a/b)
		}
	}
	if len(ss.installOrder) > 0 {
		fmt.Fprintln(out, "\n| install per kernel | runs | median s | each run s |")
		fmt.Fprintln(out, "| --- | ---: | ---: | --- |")
		for _, n := range ss.installOrder {
			fmt.Fprintf(out, "| %s | %d | %.2f | %s |\n", n, len(ss.installs[n]), median(ss.installs[n]), list(ss.installs[n]))
		}
		if len(ss.installOrder) >= 2 {
			fmt.Fprintf(out, "\n%s / %s: %.2f\n", ss.installOrder[0], ss.installOrder[1], ratio(median(ss.installs[ss.installOrder[0]]), median(ss.installs[ss.installOrder[1]])))
		}
	}
	if len(ss.sizeOrder) > 0 {
		fmt.Fprintln(out, "\n| file | bytes | MiB |")
		fmt.Fprintln(out, "| --- | ---: | ---: |")
	}
	for _, n := range ss.sizeOrder {
		fmt.Fprintf(out, "| %s | %d | %.0f |\n", n, ss.sizes[n], float64(ss.sizes[n])/(1<<20))
	}
	versusTable(out, ss.vsOrder, ss.vs)
	bootTable(out, ss.bootOrder, ss.boots)
}

// bootTable writes each variant's boot timeline (medians), then each
// variant's ratios to the first.
func bootTable(out io.Writer, order []string, boots map[string]*bootSeries) {
	if len(order) == 0 {
		return
	}
	fmt.Fprintln(out, "\nBoot timeline, seconds of kernel time since the kernel started (medians; wall includes firmware):")
	fmt.Fprintln(out, "\n| boot | runs | driver bound | /sbin/init | default target | QEMU wall |")
	fmt.Fprintln(out, "| --- | ---: | ---: | ---: | ---: | ---: |")
	for _, n := range order {
		b := boots[n]
		fmt.Fprintf(out, "| %s | %d | %.2f | %.2f | %.2f | %.1f |\n", n, len(b.bound), median(b.bound), median(b.init), median(b.target), median(b.wall))
	}
	if len(order) >= 2 {
		fmt.Fprintln(out)
		a := boots[order[0]]
		for _, n := range order[1:] {
			b := boots[n]
			fmt.Fprintf(out, "ratios %s / %s: driver bound %.2f, default target %.2f\n", n, order[0],
				ratio(median(b.bound), median(a.bound)), ratio(median(b.target), median(a.target)))
		}
	}
}

// versusTable writes the builds of the same image by other tools: each
// tool's cold and warm wall time (medians) and the image's apparent and
// allocated size, then each tool's ratios to the first.
func versusTable(out io.Writer, order []string, vs map[string]*versus) {
	if len(order) == 0 {
		return
	}
	fmt.Fprintln(out, "\n| the same image built by | cold s | warm s (median) | apparent MiB | allocated MiB |")
	fmt.Fprintln(out, "| --- | ---: | ---: | ---: | ---: |")
	for _, n := range order {
		v := vs[n]
		warm := "-"
		if len(v.warm) > 0 {
			warm = fmt.Sprintf("%.1f", median(v.warm))
		}
		fmt.Fprintf(out, "| %s | %.1f | %s | %.0f | %.0f |\n", n, median(v.cold), warm, float64(v.bytes)/(1<<20), float64(v.allocated)/(1<<20))
	}
	a := vs[order[0]]
	for _, n := range order[1:] {
		b := vs[n]
		fmt.Fprintf(out, "\nratios %s / %s: cold %.2f", n, order[0], ratio(median(b.cold), median(a.cold)))
		if len(a.warm) > 0 && len(b.warm) > 0 {
			fmt.Fprintf(out, ", warm %.2f", ratio(median(b.warm), median(a.warm)))
		}
		fmt.Fprintf(out, ", apparent size %.2f, allocated size %.2f\n", ratio(float64(b.bytes), float64(a.bytes)), ratio(float64(b.allocated), float64(a.allocated)))
	}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func list(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.1f", x)
	}
	return strings.Join(parts, ", ")
}
