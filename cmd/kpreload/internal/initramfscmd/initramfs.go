// Package initramfscmd is kpreload initramfs: an initramfs assembled
// (initramfs/assemble) from /init, the module cache's sets for a kernel and
// their boot index.
package initramfscmd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdenv"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdout"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/mistakes"
	"github.com/kpreload/kpreload/initramfs/archive"
	"github.com/kpreload/kpreload/initramfs/assemble"
	"github.com/kpreload/kpreload/internal/layout"
)

// initramfsCommand is kpreload initramfs: its options, as the flags set
// them.
type initramfsCommand struct {
	o      assemble.Options
	out    string
	comp   string
	asJSON bool
	root   string
}

// New builds kpreload initramfs.
func New() *cobra.Command { return (&initramfsCommand{}).build() }

// build makes the command: its help and its flags.
func (m *initramfsCommand) build() *cobra.Command {
	c := &cobra.Command{
		Use:   "initramfs --kernel KVER -o FILE",
		Short: "Build a kpreload initramfs for one kernel",
		Long: `Build a deterministic initramfs (newc cpio, zstd by default) holding kpreload's
static /init, the kernel's boot-critical modules (virtio, NVMe, SCSI/AHCI front ends,
Hyper-V and Xen buses, qemu_fw_cfg, ext4/xfs/btrfs/vfat/iso9660) with their
dependencies, module sets from a kpreload cache, the firmware they declare, and the
boot index /init reads. The same inputs always give byte-identical output.

--filesystems names the root filesystems to carry modules for (default: all). An
image builder knows its root's: --filesystems ext4 leaves out xfs and btrfs, half of
the uncompressed initramfs, which the kernel decompresses before /init runs.

The kernel's modules are this machine's (/lib/modules/KVER) unless --root names
a directory holding an unpacked kernel: the examples' ./6.1.0-56-cloud-amd64 is
the tree "kpreload kernels fetch 6.1.0-56-cloud-amd64" unpacked, linked into the
working directory under its release's name.`,
		Example: `  kpreload initramfs --kernel 6.1.0-56-cloud-amd64 --root ./6.1.0-56-cloud-amd64 -o initrd.img
  kpreload initramfs --kernel 6.1.0-56-cloud-amd64 --root ./6.1.0-56-cloud-amd64 --cache ./cache --filesystems ext4 --json -o initrd.img`,
		Args: mistakes.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := m.validate(); err != nil {
				return err
			}
			return m.run(cmd)
		},
	}
	m.flags(c)
	return c
}

// flags adds the flags to c.
func (m *initramfsCommand) flags(c *cobra.Command) {
	o := &m.o
	f := c.Flags()
	f.StringVar(&o.Kernel, "kernel", "", "kernel release (uname -r) the initramfs is for")
	f.StringVar(&o.ModulesDir, "modules-dir", "", "the kernel's module tree (default /lib/modules/KVER, or ROOT/lib/modules/KVER)")
	f.StringVar(&m.root, "root", "", "a directory holding an unpacked kernel (lib/modules/KVER), e.g. from scripts/kernels.sh")
	f.StringVar(&o.CacheDir, "cache", "", "include the module sets a kpreload cache holds for this kernel")
	f.StringSliceVar(&o.Filesystems, "filesystems", nil, "only these root filesystems' modules ("+strings.Join(assemble.FilesystemNames(), ", ")+"; default: all)")
	f.BoolVar(&o.Complete, "complete", false, "mark the index complete: the root's module cache holds no driver set for this kernel that --cache lacks, so /init chooses and loads drivers while it finds the root (kpreload.early=0 turns that off at boot)")
	f.StringVar(&o.Instance, "instance", "", "the image's instance YAML, copied in so an early decision sees the image's request")
	f.StringSliceVar(&o.Modules, "module", nil, "also include this kernel module and its dependencies (repeatable)")
	f.StringSliceVar(&o.ExtraFiles, "add-module", nil, "include this module file as is, in set \"extra\" (repeatable; /init still checks vermagic)")
	f.StringVar(&o.FirmwareDir, "firmware-dir", "/lib/firmware", "where declared firmware is taken from")
	f.StringVar(&o.Init, "init", "", "the static /init binary (default: kpreload-init beside this executable, else in "+layout.LibDir+")")
	f.StringVar(&o.Shell, "debug-shell", "", "a static shell (e.g. /bin/busybox) to include as /bin/sh for kpreload.debug")
	f.StringVar(&m.comp, "compression", "zstd", "zstd, lz4 (larger, faster to unpack), gzip or none")
	f.StringVarP(&m.out, "output", "o", "", "where to write the initramfs")
	f.BoolVar(&m.asJSON, "json", false, "print the result as JSON")
}

// validate checks the flags and completes the options: the compression,
// the module tree under --root, the /init binary.
func (m *initramfsCommand) validate() error {
	o := &m.o
	if o.Kernel == "" {
		return fmt.Errorf("--kernel is required (the kernel release, as uname -r prints it)")
	}
	if m.out == "" {
		return fmt.Errorf("-o/--output is required")
	}
	c, err := archive.ParseCompression(m.comp)
	if err != nil {
		return err
	}
	o.Compression = c
	if o.ModulesDir == "" && m.root != "" {
		o.ModulesDir = filepath.Join(m.root, "lib/modules", o.Kernel)
	}
	if o.Init == "" {
		o.Init = cmdenv.DefaultInit()
	}
	if _, err := os.Stat(o.Init); err != nil {
		return fmt.Errorf("/init binary: %w (build it with `make`, or pass --init)", err)
	}
	return nil
}

// run writes the initramfs and says what it holds.
func (m *initramfsCommand) run(cmd *cobra.Command) error {
	res, err := assemble.WriteFile(m.o, m.out)
	if err != nil {
		return err
	}
	if m.asJSON {
		return cmdout.PrintJSON(cmd.OutOrStdout(), res)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: %d bytes (%s), %d modules, %d sets, sha256 %s\n",
		m.out, res.Size, res.Compression, len(res.Modules), len(res.Sets), res.SHA256[:16])
	for _, fw := range res.MissingFirmware {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: firmware %s declared by an included module is not in %s\n", fw, m.o.FirmwareDir)
	}
	return nil
}
