// Package reportcmd is kpreload report: a boot's report read back, its
// timeline, blame and picture.
package reportcmd

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/bootcmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/mistakes"
	"github.com/kpreload/kpreload/internal/efivar"
	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/internal/termtext"
	"github.com/kpreload/kpreload/report"
	"github.com/kpreload/kpreload/report/svg"
	"github.com/kpreload/kpreload/report/timeline"
)

// New builds kpreload report.
func New() *cobra.Command {
	var (
		svgFile string
		blame   bool
	)
	cmd := &cobra.Command{
		Use:         "report [REPORT.json | BOOT.json] [--svg FILE | --blame]",
		Annotations: map[string]string{mistakes.ArgsNote: "the boot report to read, or what kpreload boot --json printed"},
		Short:       "Show a boot report's timeline, list its steps longest first, or draw it as an SVG picture",
		Long: `Report reads the boot report /init wrote (default ` + report.Path + `, where a
booted kpreload image keeps it) and prints its timeline: when /init started,
each module it considered with its result, phase and the devices it was for,
the root, the drivers ready and switch_root. It also reads what
kpreload boot --json printed, which adds what the console and the report
channel saw: the kernel running /init, systemd, the system up to its target.

--blame lists the boot's phases (firmware and boot loader where systemd-boot
recorded them for this boot, kernel, initramfs, userspace where known)
and /init's steps and module loads, longest first, as systemd-analyze blame
does, then the summary line: "Startup finished in ... (kernel) + ...
(initramfs) ...".

--svg FILE draws the boot as a self-contained SVG picture (no scripts, no
external resources) that any browser shows, as systemd-analyze plot does:
the summary line, the driver decision and why, the phases as bands from the
kernel's start, the milestones, /init's steps and module loads (magnified
when they are a small part of the boot), and a legend.`,
		Example: `  kpreload report report.json
  kpreload report --blame report.json
  kpreload report --svg boot.svg report.json`,
		Args: mistakes.MaxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if svgFile != "" && blame {
				return fmt.Errorf("--svg and --blame: choose one")
			}
			file := report.Path
			if len(args) == 1 {
				file = args[0]
			}
			// This boot's own report: the firmware's and systemd-boot's
			// times are in this boot's EFI variables.
			efivars := ""
			if file == report.Path {
				efivars = efiVarsDir
			}
			bt, err := readBoot(file, efivars)
			if err != nil {
				return err
			}
			rep := bt.Report
			// The report's names are shown escaped (termtext).
			w := termtext.NewWriter(cmd.OutOrStdout())
			switch {
			case svgFile != "":
				if err := svg.WriteFile(svgFile, "kpreload boot of "+rep.Kernel, []*timeline.Boot{bt}); err != nil {
					return err
				}
				fmt.Fprintf(w, "%s: the timeline of %s (%d modules)\n", termtext.Name(svgFile), termtext.Name(file), len(rep.Modules))
			case blame:
				printBlame(w, bt)
			default:
				fmt.Fprintf(w, "boot of %s (%s)\n", termtext.Name(rep.Kernel), termtext.Name(file))
				fmt.Fprintf(w, "  /init (Go main) at %.3f s after kernel start\n", rep.InitStart)
				bootcmd.PrintModuleTimeline(w, rep)
				fmt.Fprintf(w, "  %s\n", termtext.Name(rep.Summary()))
				fmt.Fprintf(w, "  %s\n", termtext.Name(bt.Summary()))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&svgFile, "svg", "", "draw the boot into this SVG file instead of printing its timeline")
	cmd.Flags().BoolVar(&blame, "blame", false, "list the boot's phases and steps by duration, longest first")
	return cmd
}

// efiVarsDir is where efivarfs is mounted.
const efiVarsDir = "/sys/firmware/efi/efivars"

// readBoot reads file, a boot report or what kpreload boot --json printed
// (the report with the console's and the report channel's times), as the
// boot's story, with the firmware's and boot loader's times from the EFI
// variables in efivars where it is not "" and systemd-boot set them.
func readBoot(file, efivars string) (*timeline.Boot, error) {
	bt, err := readBootFile(file)
	if err != nil || efivars == "" {
		return bt, err
	}
	fw, ld, ok, err := efivar.LoaderTimes(efivars)
	if err != nil {
		return nil, fmt.Errorf("the boot loader's times: %w", err)
	}
	if ok {
		bt.Firmware, bt.Loader = fw, ld
	}
	return bt, nil
}

// readBootFile reads file, a boot report or what kpreload boot --json printed.
func readBootFile(file string) (*timeline.Boot, error) {
	data, err := inroot.ReadPath(file, inroot.MaxLarge)
	if err != nil {
		return nil, fmt.Errorf("boot report: %w", err)
	}
	var probe struct {
		Report json.RawMessage `json:"report"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("boot report %s: %w", file, err)
	}
	if len(probe.Report) == 0 {
		var rep report.Report
		if err := json.Unmarshal(data, &rep); err != nil {
			return nil, fmt.Errorf("boot report %s: %w", file, err)
		}
		return &timeline.Boot{Name: "kpreload", Report: &rep}, nil
	}
	var out bootcmd.JSON
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("kpreload boot --json output %s: %w", file, err)
	}
	if out.Report == nil {
		return nil, fmt.Errorf("kpreload boot --json output %s: the boot sent no report", file)
	}
	return bootcmd.Timeline(&qemu.Result{Report: out.Report, RootInit: out.RootInit, Kernel: out.Kernel,
		UntilMatched: out.UntilMatch != "", UntilMatch: out.UntilMatch, Up: out.UpRecord}), nil
}

// printBlame lists the boot's phases and steps longest first, each with its
// duration, its name, when it ran and what the report says of it, then the
// summary line.
func printBlame(w io.Writer, bt *timeline.Boot) {
	for _, s := range bt.Blame() {
		line := fmt.Sprintf("%10.3fs %-28s %7.3f–%.3f s", s.Duration(), termtext.Name(s.Name), s.Start, s.End)
		if s.Detail != "" {
			line += "  " + termtext.Name(s.Detail)
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w, termtext.Name(bt.Summary()))
}
