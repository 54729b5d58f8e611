// Package rootdiskcmd is kpreload rootdisk: a root disk (ext4, xfs or btrfs)
// holding the test root's init, for kpreload boot --root-disk.
package rootdiskcmd

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/builder/rootdisk"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdenv"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdout"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/mistakes"
	"github.com/kpreload/kpreload/internal/layout"
)

// defaultRootInit finds a prebuilt test /sbin/init shipped with the kpreload
// executable: beside it (make build's bin/), else where the package installs it.
func defaultRootInit() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return layout.Companion(exe, layout.RootInit)
}

// parseSizeMB parses "64M", "1G", "512" (MiB) into MiB.
func parseSizeMB(s string) (int, error) {
	t := strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "B")
	mult := 1
	switch {
	case strings.HasSuffix(t, "G"), strings.HasSuffix(t, "GI"):
		mult = 1024
		t = strings.TrimSuffix(strings.TrimSuffix(t, "I"), "G")
	case strings.HasSuffix(t, "M"), strings.HasSuffix(t, "MI"):
		t = strings.TrimSuffix(strings.TrimSuffix(t, "I"), "M")
	}
	n, err := strconv.Atoi(t)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("size %q: want a number of MiB, or one ending in M or G", s)
	}
	return n * mult, nil
}

// parseAdds turns DEST=SRC pairs into a destination -> source map.
func parseAdds(adds []string) (map[string]string, error) {
	m := map[string]string{}
	for _, a := range adds {
		dest, src, ok := strings.Cut(a, "=")
		if !ok || dest == "" || src == "" {
			return nil, fmt.Errorf("--add %q: want DEST=SRC (a path in the image = a host directory)", a)
		}
		m[dest] = src
	}
	return m, nil
}

// rootdiskCommand is kpreload rootdisk: its options, as the flags set
// them.
type rootdiskCommand struct {
	o      rootdisk.Options
	size   string
	adds   []string
	asJSON bool
}

// New builds kpreload rootdisk.
func New() *cobra.Command { return (&rootdiskCommand{}).build() }

// build makes the command: its help and its flags.
func (m *rootdiskCommand) build() *cobra.Command {
	c := &cobra.Command{
		Use:   "rootdisk -o FILE",
		Short: "Build the test root disk (ext4, xfs or btrfs) whose /sbin/init reports and powers off",
		Long: `Build a root disk image, without mounting anything, whose /sbin/init is kpreload's
test init: it records the uptime, command line, root mount, /init's report, loaded
modules and PCI driver bindings, prints them as one "kpreload-rootinit: {json}" line
on the console (and on kpreload.report=), and powers the machine off. Extra host
directories can be copied in with --add.

--fstype picks the filesystem, each made by its own mkfs with that tool's defaults:
  ext4   mkfs.ext4 -d (e2fsprogs; metadata_csum, so the kernel needs crc32c); the
         default, and the only one whose images are byte-for-byte reproducible
  xfs    mkfs.xfs -p with a prototype file written from the tree (xfsprogs); at
         least 300 MiB (sparse), label at most 12 characters (default kpreloadroot)
  btrfs  mkfs.btrfs --rootdir (btrfs-progs); at least 109 MiB (sparse)

The init program is --init, else kpreload-rootinit beside this executable or in
` + layout.LibDir + ` (the package's), else it is built with the go tool from
kpreload's source tree: $KPRELOAD_SRC, else the working directory or the
nearest one above it with kpreload's go.mod.`,
		Example: `  kpreload rootdisk -o root.img
  kpreload rootdisk -o root.img --uuid 5f1d2c3b-8a9e-4f70-b6d5-4c3b2a190807 --add /var/lib/kpreload/cache=./cache
  kpreload rootdisk -o root-xfs.img --fstype xfs --uuid 5f1d2c3b-8a9e-4f70-b6d5-4c3b2a190807`,
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
func (m *rootdiskCommand) flags(c *cobra.Command) {
	o := &m.o
	f := c.Flags()
	f.StringVarP(&o.Out, "output", "o", "", "image file to write")
	f.StringVar(&o.FSType, "fstype", rootdisk.FSExt4, "filesystem: "+strings.Join(rootdisk.FSTypes, ", "))
	f.StringVar(&m.size, "size", "", "image size (e.g. 64M, 1G); default fits the contents, at least 64M (btrfs 128M, xfs 300M)")
	f.StringVar(&o.UUID, "uuid", "", "filesystem UUID (default random)")
	f.StringVar(&o.Label, "label", "", "filesystem label (default "+rootdisk.DefaultLabel+", on xfs "+rootdisk.DefaultLabelXFS+")")
	f.StringVar(&o.Init, "init", "", "program to install as /sbin/init (default: kpreload-rootinit beside kpreload or in "+layout.LibDir+", else built)")
	f.StringArrayVar(&m.adds, "add", nil, "copy a host directory into the image, DEST=SRC (repeatable)")
	f.BoolVar(&m.asJSON, "json", false, "print the result as JSON")
}

// validate checks the flags and reads the size and the directories to
// add into the options.
func (m *rootdiskCommand) validate() error {
	o := &m.o
	if o.Out == "" {
		return fmt.Errorf("-o/--output is required")
	}
	var err error
	if m.size != "" {
		if o.SizeMB, err = parseSizeMB(m.size); err != nil {
			return err
		}
	}
	o.Extra, err = parseAdds(m.adds)
	return err
}

// run finds or builds the init program, builds the disk and says what it
// made.
func (m *rootdiskCommand) run(cmd *cobra.Command) error {
	o := m.o
	if o.Init == "" {
		if p := defaultRootInit(); p != "" {
			if _, err := os.Stat(p); err == nil {
				o.Init = p
			}
		}
	}
	if o.Init == "" {
		dir, err := os.MkdirTemp("", "kpreload-rootinit-")
		if err != nil {
			return fmt.Errorf("temporary directory: %w", err)
		}
		defer os.RemoveAll(dir)
		o.Init = filepath.Join(dir, "init")
		if err := rootdisk.BuildRootInitFrom(cmd.Context(), cmdenv.SourceDir(), o.Init); err != nil {
			return fmt.Errorf("no --init given and building one failed: %w", err)
		}
	}
	if err := rootdisk.Build(cmd.Context(), o); err != nil {
		return err
	}
	st, err := os.Stat(o.Out)
	if err != nil {
		return err
	}
	label := o.Label
	if label == "" {
		label = rootdisk.LabelFor(o.FSType)
	}
	if m.asJSON {
		return cmdout.PrintJSON(cmd.OutOrStdout(), map[string]any{
			"image": o.Out, "fstype": o.FSType, "size": st.Size(), "label": label, "uuid": o.UUID, "init": o.Init, "extra": o.Extra,
		})
	}
	uuid := o.UUID
	if uuid == "" {
		uuid = "random"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: %s, %d MiB, label %s, UUID %s, /sbin/init from %s\n",
		o.Out, o.FSType, st.Size()>>20, label, uuid, o.Init)
	return nil
}
