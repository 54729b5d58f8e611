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

func boot(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("boot", flag.ContinueOnError)
	name := fs.String("name", "", "variant name")
	disk := fs.String("disk", "", "disk image (booted through its firmware unless -kernel is given)")
	firmware := fs.String("firmware", qemu.FirmwareUEFI, "the disk's firmware: uefi (OVMF), uefi-secure (OVMF with Secure Boot) or bios (SeaBIOS)")
	vars := fs.String("vars", "", "the OVMF variable store to boot with a copy of (uefi-secure: the image's <name>.ovmf-vars.fd)")
	var drives multiFlag
	fs.Var(&drives, "drive", "a disk attached read-only on virtio after the root disk, such as a NoCloud seed (repeatable)")
	network := fs.Bool("net", false, "give the guest QEMU's user-mode network (restrict=on)")
	wantSource := fs.String("want-source", "", "require /init's driver request to have come from this source (seed, fw_cfg, image, ...)")
	kernel := fs.String("kernel", "", "boot this kernel directly (with -initrd and -append)")
	initrd := fs.String("initrd", "", "initramfs for -kernel")
	appendArgs := fs.String("append", "", "kernel command line additions for -kernel")
	timeout := fs.Duration("timeout", 480*time.Second, "give up after this long")
	work := fs.String("work", "", "directory for the logs")
	inst := fs.String("instance", "", "instance YAML passed to /init through fw_cfg ("+instance.FwCfgName+")")
	human := fs.Bool("human", false, "print the timeline and the report summary for people")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *name == "" || *disk == "" {
		return errors.New("boot: -name and -disk are required")
	}
	c := qemu.Config{RootDisk: *disk, Devices: []string{"edu"}, Until: defaultTarget, Timeout: *timeout, Drives: drives}
	if *kernel != "" {
		c.Kernel, c.Initramfs, c.Append = *kernel, *initrd, *appendArgs
	} else {
		c.Firmware, c.OVMFVars = *firmware, *vars
	}
	if *network {
		// qemu.Config makes its user-mode network (restrict=on: nothing
		// leaves the host) only for forwards: one to the guest's ssh port
		// from a free loopback port, which nothing uses.
		port, err := freePort()
		if err != nil {
			return err
		}
		c.HostForwards = []string{fmt.Sprintf("tcp:127.0.0.1:%d-:22", port)}
	}
	if *inst != "" {
		c.FwCfg = map[string]string{instance.FwCfgName: *inst}
	}
	res, err := (&qemu.Runner{WorkDir: *work}).Run(context.Background(), c)
	if err != nil {
		return fmt.Errorf("boot %s: %w", *name, err)
	}
	if !res.UntilMatched {
		return fmt.Errorf("boot %s: systemd did not reach its default target (console %s)", *name, res.Console)
	}
	if *firmware == qemu.FirmwareUEFISecure && *kernel == "" && !*human {
		if rep := res.Report; rep == nil || rep.SecureBoot == nil || rep.SecureBoot.SecureBoot != secureboot.Enabled {
			return fmt.Errorf("boot %s: the report does not say Secure Boot was on (console %s)", *name, res.Console)
		}
	}
	if *wantSource != "" {
		if rep := res.Report; rep == nil || rep.Selection == nil || rep.Selection.Source != *wantSource {
			got := "no report"
			if rep != nil && rep.Selection != nil {
				got = rep.Selection.Source + " " + rep.Selection.Origin
			}
			return fmt.Errorf("boot %s: /init's driver request came from %s, want %s (console %s)", *name, got, *wantSource, res.Console)
		}
	}
	s := Sample{Kind: "boot", Name: *name, Wall: res.Duration.Seconds()}
	bound, ok := qemu.Find(res.Kernel, "bound, id 0x010000ed")
	if !ok && !*human {
		return fmt.Errorf("boot %s: the test driver never bound the edu device (console %s)", *name, res.Console)
	}
	s.Bound = bound.Time
	console, err := os.ReadFile(res.Console)
	if err != nil {
		return err
	}
	lines := printkLines(console)
	for _, l := range lines {
		if s.Target == 0 && defaultTarget.MatchString(l.Text) {
			s.Target = l.Time
		}
	}
	if s.Target == 0 && !*human {
		return fmt.Errorf("boot %s: no kernel-timestamped default target line (boot with systemd.log_target=kmsg printk.devkmsg=on; console %s)", *name, res.Console)
	}
	// /sbin/init's start, measured the same way for every initramfs: systemd's
	// first message (the kpreload report's switch_root time when it is missing).
	if l, ok := qemu.Find(lines, "running in system mode"); ok {
		s.Init = l.Time
	} else if res.Report != nil {
		s.Init = res.Report.SwitchRoot
	}
	if !*human {
		return json.NewEncoder(out).Encode(s)
	}
	how := "direct kernel boot"
	switch c.Firmware {
	case qemu.FirmwareUEFI:
		how = "UEFI through the image's bootloader"
	case qemu.FirmwareUEFISecure:
		how = "UEFI Secure Boot through the image's bootloader"
	case qemu.FirmwareBIOS:
		how = "BIOS through the image's bootloader"
	}
	fmt.Fprintf(out, "boot %s (%s, %s, QEMU ran %.1fs):\n", *name, res.Accel, how, s.Wall)
	fmt.Fprintf(out, "  %7.2fs  kernel started\n", 0.0)
	if ok {
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
	return nil
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

func table(path string, out io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	builds := map[string][]float64{}
	installs := map[string][]float64{}
	sizes := map[string]int64{}
	var sizeOrder, buildOrder, installOrder, bootOrder []string
	type series struct{ bound, init, target, wall []float64 }
	boots := map[string]*series{}
	vs := map[string]*versus{}
	var vsOrder []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var s Sample
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		switch s.Kind {
		case "build":
			if _, ok := builds[s.Name]; !ok {
				buildOrder = append(buildOrder, s.Name)
			}
			builds[s.Name] = append(builds[s.Name], s.Seconds)
		case "install":
			if _, ok := installs[s.Name]; !ok {
				installOrder = append(installOrder, s.Name)
			}
			installs[s.Name] = append(installs[s.Name], s.Seconds)
		case "size":
			if _, ok := sizes[s.Name]; !ok {
				sizeOrder = append(sizeOrder, s.Name)
			}
			sizes[s.Name] = s.Bytes
		case "versus":
			v := vs[s.Name]
			if v == nil {
				v = &versus{}
				vs[s.Name] = v
				vsOrder = append(vsOrder, s.Name)
			}
			switch s.Phase {
			case "cold":
				v.cold = append(v.cold, s.Seconds)
				v.bytes, v.allocated = s.Bytes, s.Allocated
			case "warm":
				v.warm = append(v.warm, s.Seconds)
			default:
				return fmt.Errorf("%s: versus sample %q: phase %q, want cold or warm", path, s.Name, s.Phase)
			}
		case "boot":
			b := boots[s.Name]
			if b == nil {
				b = &series{}
				boots[s.Name] = b
				bootOrder = append(bootOrder, s.Name)
			}
			b.bound = append(b.bound, s.Bound)
			b.init = append(b.init, s.Init)
			b.target = append(b.target, s.Target)
			b.wall = append(b.wall, s.Wall)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(buildOrder) > 0 {
		fmt.Fprintln(out, "| packer build | runs | median s | each run s |")
		fmt.Fprintln(out, "| --- | ---: | ---: | --- |")
	}
	for _, n := range buildOrder {
		fmt.Fprintf(out, "| %s | %d | %.1f | %s |\n", n, len(builds[n]), median(builds[n]), list(builds[n]))
	}
	if len(buildOrder) >= 2 {
		a, b := median(builds[buildOrder[0]]), median(builds[buildOrder[1]])
		if b > 0 {
			fmt.Fprintf(out, "\n%s / %s: %.1fx\n", buildOrder[0], buildOrder[1], a/b)
		}
	}
	if len(installOrder) > 0 {
		fmt.Fprintln(out, "\n| install per kernel | runs | median s | each run s |")
		fmt.Fprintln(out, "| --- | ---: | ---: | --- |")
		for _, n := range installOrder {
			fmt.Fprintf(out, "| %s | %d | %.2f | %s |\n", n, len(installs[n]), median(installs[n]), list(installs[n]))
		}
		if len(installOrder) >= 2 {
			fmt.Fprintf(out, "\n%s / %s: %.2f\n", installOrder[0], installOrder[1], ratio(median(installs[installOrder[0]]), median(installs[installOrder[1]])))
		}
	}
	if len(sizeOrder) > 0 {
		fmt.Fprintln(out, "\n| file | bytes | MiB |")
		fmt.Fprintln(out, "| --- | ---: | ---: |")
	}
	for _, n := range sizeOrder {
		fmt.Fprintf(out, "| %s | %d | %.0f |\n", n, sizes[n], float64(sizes[n])/(1<<20))
	}
	versusTable(out, vsOrder, vs)
	if len(bootOrder) > 0 {
		fmt.Fprintln(out, "\nBoot timeline, seconds of kernel time since the kernel started (medians; wall includes firmware):")
		fmt.Fprintln(out, "\n| boot | runs | driver bound | /sbin/init | default target | QEMU wall |")
		fmt.Fprintln(out, "| --- | ---: | ---: | ---: | ---: | ---: |")
	}
	for _, n := range bootOrder {
		b := boots[n]
		fmt.Fprintf(out, "| %s | %d | %.2f | %.2f | %.2f | %.1f |\n", n, len(b.bound), median(b.bound), median(b.init), median(b.target), median(b.wall))
	}
	if len(bootOrder) >= 2 {
		fmt.Fprintln(out)
		a := boots[bootOrder[0]]
		for _, n := range bootOrder[1:] {
			b := boots[n]
			fmt.Fprintf(out, "ratios %s / %s: driver bound %.2f, default target %.2f\n", n, bootOrder[0],
				ratio(median(b.bound), median(a.bound)), ratio(median(b.target), median(a.target)))
		}
	}
	return nil
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
