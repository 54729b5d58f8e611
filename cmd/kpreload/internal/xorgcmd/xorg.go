// Package xorgcmd is kpreload xorg: an xorg.conf for the machine's NVIDIA GPUs
// (gpu/xorg).
package xorgcmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdout"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/mistakes"
	"github.com/kpreload/kpreload/gpu/xorg"
	"github.com/kpreload/kpreload/internal/fileutil"
)

// xorgResult is the --json output of kpreload xorg.
type xorgResult struct {
	GPUs   []xorg.GPU `json:"gpus"`
	Output string     `json:"output,omitempty"`
	Config string     `json:"config"`
}

// New builds kpreload xorg.
func New() *cobra.Command {
	var (
		root, out string
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "xorg [--sysfs ROOT] [-o FILE] [--json]",
		Short: "Write an xorg.conf with one Device and Screen per NVIDIA GPU",
		Long: `xorg writes an xorg.conf for images with displays: one Device (driver "nvidia")
and one Screen per NVIDIA GPU, each Device pinned to its GPU by a BusID taken from
sysfs (PCI addresses are hexadecimal there, BusID fields decimal: 0000:41:00.0 is
"PCI:65:0:0"; outside PCI domain 0 "PCI:bus@domain:device:function").

GPUs are the devices of vendor 0x10de with PCI class 0x03 (VGA 0x0300, 3D 0x0302,
other display 0x0380); their audio and USB functions are left out. Screens allow
an empty initial configuration, so GPUs without outputs run headless X.

ROOT is "/", a tree holding sys/bus/pci/devices, or a capture: a pci-sysfs.txt
of "<pci address> <file> <contents>" lines, or a directory holding one (such as
testdata/h200-gpu-vm in a checkout). The file is replaced atomically; without -o
the configuration goes to stdout; Xorg reads /etc/X11/xorg.conf. It is an error
when there is no NVIDIA GPU.`,
		Example: `  kpreload xorg --sysfs testdata/h200-gpu-vm -o xorg.conf
  kpreload xorg --sysfs testdata/h100-gpu-vm/pci-sysfs.txt --json`,
		Args: mistakes.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			gpus, err := xorg.Find(root)
			if err != nil {
				return err
			}
			if len(gpus) == 0 {
				return fmt.Errorf("xorg: no NVIDIA GPU (vendor 0x10de, display class 0x03) in %s", root)
			}
			conf := xorg.Config(gpus)
			if out != "" {
				if err := fileutil.WriteAtomic(out, []byte(conf), 0o644, false); err != nil {
					return fmt.Errorf("xorg: %w", err)
				}
			}
			switch {
			case asJSON:
				return cmdout.PrintJSON(cmd.OutOrStdout(), xorgResult{GPUs: gpus, Output: out, Config: conf})
			case out == "":
				_, err := fmt.Fprint(cmd.OutOrStdout(), conf)
				return err
			}
			for _, g := range gpus {
				fmt.Fprintf(cmd.OutOrStdout(), "%s -> BusID %q\n", g.Address, g.BusID)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%d GPUs)\n", out, len(gpus))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&root, "sysfs", "/", "root holding sys/bus/pci/devices, or a capture (pci-sysfs.txt, or its directory)")
	f.StringVarP(&out, "output", "o", "", "file to write (default: stdout)")
	f.BoolVar(&asJSON, "json", false, "print the GPUs and the configuration as JSON")
	return cmd
}
