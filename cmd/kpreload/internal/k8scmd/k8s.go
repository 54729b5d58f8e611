// Package k8scmd is kpreload k8s: the device plugin's and MIG manager's
// configurations (gpu/k8sconfig) written for the GPUs and driver of a root.
package k8scmd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/mistakes"
	"github.com/kpreload/kpreload/gpu/k8sconfig"
	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/report"
)

// New builds kpreload k8s and k8s refresh.
func New() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "k8s",
		Short:   "Kubernetes GPU sharing and MIG configs from the instance YAML",
		Example: `  kpreload k8s refresh --root ./root --report report.json`,
		Args:    mistakes.NoArgs,
	}
	cmd.AddCommand(newK8sRefreshCmd())
	return cmd
}

func newK8sRefreshCmd() *cobra.Command {
	var root, reportPath string
	cmd := &cobra.Command{
		Use:   "refresh [--root DIR] [--report FILE]",
		Short: "Write /etc/kpreload/k8s/{device-plugin,mig-config}.yaml from this boot's decision",
		Long: `refresh reads this boot's driver decision (the selection section of
` + report.Path + `, where /init recorded the instance YAML's gpu.sharing and
gpu.mig and the MIG layout the GPUs present can take) and writes, atomically:

  /etc/kpreload/k8s/device-plugin.yaml  the NVIDIA device plugin's config file
      (--config-file): time-slicing or MPS replicas per GPU, and the MIG
      strategy (single when every GPU has one profile, mixed otherwise);
  /etc/kpreload/k8s/mig-config.yaml     the NVIDIA MIG manager's config file
      (mig-parted v1): one config named after the request (the value of the
      nvidia.com/mig.config node label), one entry per GPU model.

A file the decision does not ask for is removed, so none outlives the request
that made it; a MIG request the GPUs cannot take was refused at boot (the
report says why) and writes no MIG file. kpreload never changes MIG mode
itself. kpreload-k8s.service runs this at boot.`,
		Example: `  kpreload k8s refresh --root ./root --report report.json`,
		Args:    mistakes.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var sel *report.Selection
			// The report is a regular file of bounded size (a FIFO or
			// /dev/zero there is an error, not a hang).
			b, err := inroot.ReadPath(reportPath, inroot.MaxLarge)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				// No report: not booted by kpreload's /init; nothing was asked.
			case err != nil:
				return fmt.Errorf("k8s refresh: %w", err)
			default:
				var rep report.Report
				if err := json.Unmarshal(b, &rep); err != nil {
					return fmt.Errorf("k8s refresh: %s: %w", reportPath, err)
				}
				sel = rep.Selection
			}
			if sel != nil && sel.MIG != nil && sel.MIG.Refusal != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "kpreload: MIG: %s\n", sel.MIG.Refusal)
			}
			written, removed, err := k8sconfig.Refresh(root, sel)
			for _, p := range written {
				fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\n", p)
			}
			for _, p := range removed {
				fmt.Fprintf(cmd.OutOrStdout(), "removed %s (not asked for this boot)\n", p)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&root, "root", "/", "root directory to write etc/kpreload/k8s/ under")
	cmd.Flags().StringVar(&reportPath, "report", report.Path, "the boot report to read the decision from")
	return cmd
}
