package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/internal/termtext"
	"github.com/kpreload/kpreload/report"
	"github.com/kpreload/kpreload/report/svg"
)

func init() { register(newReportCmd) }

func newReportCmd() *cobra.Command {
	var svgFile string
	cmd := &cobra.Command{
		Use:         "report [REPORT.json] [--svg FILE]",
		Annotations: map[string]string{argsNote: "the boot report to read"},
		Short:       "Show a boot report's timeline, or draw it as an SVG picture",
		Long: `Report reads the boot report /init wrote (default ` + report.Path + `, where a
booted kpreload image keeps it) and prints its timeline: when /init started,
each module it considered with its result, phase and the devices it was for,
the root, the drivers ready and switch_root.

--svg FILE draws the same timeline as a self-contained SVG picture (no scripts,
no external resources) that any browser shows.`,
		Example: `  kpreload report report.json
  kpreload report --svg boot.svg report.json`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			file := report.Path
			if len(args) == 1 {
				file = args[0]
			}
			data, err := inroot.ReadPath(file, inroot.MaxLarge)
			if err != nil {
				return fmt.Errorf("boot report: %w", err)
			}
			var rep report.Report
			if err := json.Unmarshal(data, &rep); err != nil {
				return fmt.Errorf("boot report %s: %w", file, err)
			}
			// The report's names are shown escaped (termtext).
			w := termtext.NewWriter(cmd.OutOrStdout())
			if svgFile != "" {
				if err := svg.WriteFile(svgFile, "kpreload boot of "+rep.Kernel, []svg.Lane{svg.FromReport("kpreload /init", &rep)}); err != nil {
					return err
				}
				fmt.Fprintf(w, "%s: the timeline of %s (%d modules)\n", termtext.Name(svgFile), termtext.Name(file), len(rep.Modules))
				return nil
			}
			fmt.Fprintf(w, "boot of %s (%s)\n", termtext.Name(rep.Kernel), termtext.Name(file))
			fmt.Fprintf(w, "  /init (Go main) at %.3f s after kernel start\n", rep.InitStart)
			printModuleTimeline(w, &rep)
			fmt.Fprintf(w, "  %s\n", termtext.Name(rep.Summary()))
			return nil
		},
	}
	cmd.Flags().StringVar(&svgFile, "svg", "", "draw the timeline into this SVG file instead of printing it")
	return cmd
}
