// Package plancmd is kpreload plan: the driver decision (gpu/selection) for
// this machine or a captured one, taken and printed, changing nothing.
package plancmd

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdout"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/mistakes"
	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/gpu/k8sconfig"
	"github.com/kpreload/kpreload/gpu/selection"
	"github.com/kpreload/kpreload/report"
)

// New builds kpreload plan.
func New() *cobra.Command {
	var (
		sysRoot, cacheDir, kernel, instFile string
		asJSON                              bool
	)
	cmd := &cobra.Command{
		Use:   "plan --sysfs ROOT --cache DIR --kernel KVER [--instance FILE]",
		Short: "Show which cached driver version /init would load on a machine, loading nothing",
		Long: `Take the GPU driver decision kpreload's /init would take at boot, on any host,
without loading anything: the PCI devices under --sysfs (a sysfs mount such as /sys,
a filesystem root such as /, or a capture: a pci-sysfs.txt of "<pci address> <file>
<contents>" lines, or a directory holding one), the driver sets that the
module cache --cache holds for kernel --kernel, and the instance request in
--instance (default: the latest cached version, flavour auto).

For every driver it lists each cached set with the rule that excluded it
(vermagic, signature, version, cuda, supported-gpus, hardware, flavor,
not-chosen; signature: under Secure Boot or module.sig_enforce=1, a set that is
unsigned or signed by a certificate no kernel keyring holds) and the
chosen set, or a refusal that says which GPU, which version was asked, what the
cache holds and what would work. A refusal is a decision, not an error: the exit
status is 0 unless the inputs cannot be read. --json prints the same structure as
the "selection" section of the boot report.

On a machine itself: kpreload plan --sysfs / --cache /var/lib/kpreload/cache
--kernel "$(uname -r)". The examples run in a checkout: testdata/ holds the PCI
captures of an H100 and an H200 VM and a cache bundle (scripts/plan-bundle.sh)
of real 535 and 550 sets, their boot index and supported-GPU lists without the
modules.`,
		Example: `  kpreload plan --sysfs testdata/h100-gpu-vm/pci-sysfs.txt --cache testdata/plan-bundle --kernel 6.1.0-56-cloud-amd64
  kpreload plan --sysfs testdata/h200-gpu-vm --cache testdata/plan-bundle --kernel 6.1.0-56-cloud-amd64 --instance images/instance-gpu-550.yaml --json`,
		Args: mistakes.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if sysRoot == "" || cacheDir == "" || kernel == "" {
				return errors.New("--sysfs, --cache and --kernel are required")
			}
			if err := mistakes.CheckNames("--kernel", kernel); err != nil {
				return fmt.Errorf("plan: %w", err)
			}
			// Everything under --sysfs is read inside it, bounded.
			m, err := selection.Gather(selection.Where{SysDir: sysRoot, CacheDir: cacheDir, Kernel: kernel})
			if err != nil {
				return fmt.Errorf("plan: %w", err)
			}
			req := instance.Request{Source: instance.SourceDefault, Origin: "no --instance: latest cached version, flavour auto"}
			if instFile != "" {
				if req, err = instance.ReadRequest("file", instFile); err != nil {
					return fmt.Errorf("plan: %w", err)
				}
			}
			d := m.Decide(req)
			files, err := k8sconfig.Files(&d.Selection)
			if err != nil {
				return fmt.Errorf("plan: %w", err)
			}
			if asJSON {
				return cmdout.PrintJSON(cmd.OutOrStdout(), planJSON{Selection: &d.Selection, K8sFiles: stringFiles(files)})
			}
			PrintPlan(cmd.OutOrStdout(), d)
			printK8sFiles(cmd.OutOrStdout(), files)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&sysRoot, "sysfs", "", "sysfs to read PCI devices from: /sys, a root such as /, or a capture (pci-sysfs.txt, or its directory)")
	f.StringVar(&cacheDir, "cache", "", "kpreload module cache directory (holds index/<kernel>.json)")
	f.StringVar(&kernel, "kernel", "", "kernel release the machine runs (uname -r)")
	f.StringVar(&instFile, "instance", "", "instance YAML with the driver request (resources.driver.version/cuda/flavor)")
	f.BoolVar(&asJSON, "json", false, "print the decision as JSON (the boot report's selection section)")
	return cmd
}

// planJSON is plan --json: the boot report's selection section, plus the
// Kubernetes files the boot would write (path under / -> content).
type planJSON struct {
	*report.Selection
	K8sFiles map[string]string `json:"k8s_files,omitempty"`
}

func stringFiles(files map[string][]byte) map[string]string {
	if len(files) == 0 {
		return nil
	}
	out := map[string]string{}
	for k, v := range files {
		out["/"+k] = string(v)
	}
	return out
}

// printK8sFiles shows the Kubernetes files the boot would write.
func printK8sFiles(w io.Writer, files map[string][]byte) {
	for _, rel := range []string{k8sconfig.DevicePluginFile, k8sconfig.MIGConfigFile} {
		if b, ok := files[rel]; ok {
			fmt.Fprintf(w, "\n/%s (kpreload-k8s.service writes it at boot):\n%s", rel, b)
		}
	}
}

// PrintPlan writes the human form of a decision.
func PrintPlan(w io.Writer, d *selection.Decision) {
	r := d.Request
	fmt.Fprintf(w, "kernel %s; request from %s (%s): version %s, flavour %s", d.Kernel, d.Source, d.Origin, r.Version, r.Flavor)
	if r.CUDA != "" {
		fmt.Fprintf(w, ", cuda %s", r.CUDA)
	}
	if r.GPUType != "" || r.GPUCount > 0 {
		fmt.Fprintf(w, ", gpu %s x%d", r.GPUType, r.GPUCount)
	}
	fmt.Fprintln(w)
	if len(d.GPUs) == 0 {
		fmt.Fprintln(w, "NVIDIA GPUs: none")
	}
	for _, g := range d.GPUs {
		name := g.Name
		if name == "" {
			name = "not named by any cached supported-gpus.json"
		}
		fmt.Fprintf(w, "NVIDIA GPU %s %s (subsystem %s, class %s): %s\n", g.Address, g.ID, g.Subsystem, g.Class, name)
	}
	if len(d.Drivers) == 0 {
		fmt.Fprintf(w, "no driver sets cached for kernel %s: nothing to choose\n", d.Kernel)
	}
	for _, dd := range d.Drivers {
		applies := "request applies"
		if !dd.Requested {
			applies = "request is for the GPU driver; this one takes the latest"
		}
		if dd.Chosen != nil {
			fmt.Fprintf(w, "%s: load %s %s (set %s, %s) [%s, %s]\n", dd.Driver, dd.Chosen.Version, dd.Chosen.Flavor, shortID(dd.Chosen.ID), dd.Chosen.From, dd.Rule, applies)
		} else {
			fmt.Fprintf(w, "%s: load nothing [%s, %s]\n  %s\n", dd.Driver, dd.Rule, applies, dd.Refusal)
		}
		for _, c := range dd.Candidates {
			verdict := "chosen"
			if c.Excluded != "" {
				verdict = c.Excluded + ": " + c.Reason
			}
			fmt.Fprintf(w, "  %-12s %-12s %s  %s\n", c.Version, c.Flavor, shortID(c.ID), verdict)
		}
	}
	if r.Sharing != "" {
		fmt.Fprintf(w, "Kubernetes GPU sharing: %s, %d replicas per GPU\n", r.Sharing, r.SharingReplicas)
	}
	if m := d.MIG; m != nil {
		if m.Refusal != "" {
			fmt.Fprintf(w, "MIG %s: %s\n", m.Request, m.Refusal)
		}
		for _, g := range m.GPUs {
			state := "MIG off"
			if g.Enabled {
				state = "MIG on"
			}
			fmt.Fprintf(w, "MIG %s: GPU %s %s (%s): %s", m.Request, g.Address, g.ID, orDash(g.Model), state)
			for _, p := range slices.Sorted(maps.Keys(g.Devices)) {
				fmt.Fprintf(w, ", %d × %s", g.Devices[p], p)
			}
			fmt.Fprintln(w)
		}
	}
	for _, warn := range d.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
