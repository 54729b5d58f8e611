package installcmd

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/builder/adopt"
	"github.com/kpreload/kpreload/builder/image/stage"
	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cells"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdenv"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdout"
)

// stageFlags are install's flags for a root kpreload never staged
// (--stage): what the Packer provisioner stages, from the same options.
type stageFlags struct {
	stage         bool
	image         string
	partition     int
	recipeArgs    []string
	recipesDir    string
	rf            cells.RemoteFlags
	allowUnsigned bool
	o             stage.Options
}

func (s *stageFlags) add(c *cobra.Command) {
	f := c.Flags()
	f.BoolVar(&s.stage, "stage", false, "first put kpreload into the root, as the Packer provisioner does: the binaries, /init, the --recipe drivers' cells for the root's kernels (from --cache, or pulled from --remote), their userspace, the systemd units (kpreload-boot-ok arms GRUB's fallback)")
	f.StringVar(&s.image, "image", "", "with --stage: a raw disk image file instead of --root: its root partition is mounted at its offset while kpreload goes in")
	f.IntVar(&s.partition, "partition", 0, "with --image: the root's partition number (default: the one Linux partition; a file with no partition table is the filesystem)")
	f.StringArrayVar(&s.recipeArgs, "recipe", nil, "with --stage: a driver recipe the root carries: a file, or a name in --recipes (repeatable)")
	f.StringVar(&s.recipesDir, "recipes", "", "with --stage: directory of recipes for --recipe names"+cells.RecipesDefaultHelp)
	f.StringVar(&s.o.CacheDir, "cache", cmdenv.CacheDefaultDir(), "with --stage: module cache the driver cells are read from")
	f.BoolVar(&s.o.BuildMissing, "build-missing", false, "with --stage: build cells missing from the cache with dkms instead of failing")
	s.rf.Register(f)
	f.BoolVar(&s.allowUnsigned, "allow-unsigned", false, "with --remote and no --trust: take the driver cells unsigned, on purpose (without it --remote needs --trust)")
	f.StringVar(&s.o.Instance, "instance", "", "with --stage: instance YAML file to put at /"+install.Instance)
	f.StringVar(&s.o.RemoteConfig, "remote-config", "", "with --stage: registry configuration for the kernel hook, put at /"+install.RemoteFile+" with the keys and credentials it names")
	f.BoolVar(&s.o.EarlyDrivers, "early-drivers", false, "with --stage: put the driver sets into each initramfs with a complete index (the early decision)")
	f.StringVar(&s.o.KpreloadBinary, "kpreload-binary", "", "with --stage: static kpreload binary to put at /"+install.Kpreload+" (default: this executable)")
	f.StringVar(&s.o.InitBinary, "init", "", "with --stage: the static /init binary (default: kpreload-init beside this executable)")
}

// check refuses stage flags without --stage, and --stage's own conflicts.
func (s *stageFlags) check(c *cobra.Command, root string) error {
	if !s.stage {
		for _, name := range []string{"image", "partition", "recipe", "recipes", "cache", "build-missing", "remote", "trust", "allow-unsigned", "instance", "remote-config", "early-drivers", "kpreload-binary", "init", "sign", "plain-http", "docker-config"} {
			if c.Flags().Changed(name) {
				return fmt.Errorf("--%s needs --stage", name)
			}
		}
		return nil
	}
	if s.image != "" && c.Flags().Changed("root") {
		return fmt.Errorf("--image and --root: give one (--image mounts the image's root itself)")
	}
	if s.image == "" && root == "/" {
		return fmt.Errorf("--stage needs --root DIR (a mounted image) or --image FILE: this system gets kpreload from its package or the Packer provisioner")
	}
	if c.Flags().Changed("partition") && s.image == "" {
		return fmt.Errorf("--partition needs --image")
	}
	return s.rf.ImageTrust(s.allowUnsigned)
}

// options fills the stage options the flags name.
func (s *stageFlags) options(kernels []string, cmdline string) (adopt.Options, error) {
	o := s.o
	o.Kernels = kernels
	o.Cmdline = cmdline
	rm, err := s.rf.Open()
	if err != nil {
		return adopt.Options{}, err
	}
	o.Remote = rm
	if len(s.recipeArgs) > 0 {
		dir, err := cells.ResolveRecipesDir(s.recipesDir)
		if err != nil {
			return adopt.Options{}, err
		}
		if o.Recipes, err = cells.LoadRecipes(s.recipeArgs, dir); err != nil {
			return adopt.Options{}, err
		}
	}
	if o.KpreloadBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return adopt.Options{}, fmt.Errorf("find this executable to stage (pass --kpreload-binary): %w", err)
		}
		o.KpreloadBinary = exe
	}
	if o.InitBinary == "" {
		o.InitBinary = cmdenv.DefaultInit()
	}
	o.DownloadDir = cmdenv.DownloadDir()
	return adopt.Options{Stage: o}, nil
}

// run stages kpreload into the root (or the image's) and installs it.
func (s *stageFlags) run(cmd *cobra.Command, f installFlags, io install.Options) error {
	o, err := s.options(io.Kernels, f.cmdline)
	if err != nil {
		return fmt.Errorf("install --stage: %w", err)
	}
	o.Install, o.Log = io, cmd.ErrOrStderr()
	var res *adopt.Result
	if s.image != "" {
		res, err = adopt.Image(cmd.Context(), s.image, adopt.ImageOptions{Partition: s.partition}, o)
	} else {
		res, err = adopt.Root(cmd.Context(), f.root, o)
	}
	where := f.root
	if s.image != "" {
		where = s.image
	}
	if err != nil {
		return fmt.Errorf("install --stage into %s: %w", where, err)
	}
	if f.asJSON {
		return cmdout.PrintJSON(cmd.OutOrStdout(), res)
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "kpreload staged into %s for %v; %s boots kernel %s with kpreload by default\n", where, res.Kernels, res.Install.Bootloader, res.Install.Default)
	for _, d := range res.Staged.Drivers {
		fmt.Fprintf(out, "  driver %s %s (%s) for %s: set %.12s\n", d.Driver, d.Version, d.Recipe, d.Kernel, d.SetID)
	}
	if len(res.Units) > 0 {
		fmt.Fprintf(out, "  units enabled: %v\n", res.Units)
	}
	return nil
}
