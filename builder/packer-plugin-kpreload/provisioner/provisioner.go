//go:generate go tool packer-sdc mapstructure-to-hcl2 -type Config
//go:generate go tool packer-sdc struct-markdown

// Package provisioner is the kpreload Packer provisioner (`provisioner "kpreload"`):
// for images made by other builders (packer-plugin-qemu, cloud builders), it
// stages kpreload's files locally with builder/image (the module cache subset
// for the image's kernels, each driver version's userspace, firmware, the
// kpreload binaries, the kernel install hooks, an instance YAML), uploads them
// as one archive through the communicator (as the communicator's user, so a
// non-root ssh_username with use_sudo works) and installs them on the target:
// unpack, ldconfig, enable the systemd units staged, and `kpreload install`
// (builder/install), which builds each kernel's kpreload initramfs from the
// target's own module tree and makes the target's GRUB or systemd-boot boot
// it, failing the build when it cannot.
package provisioner

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/packer-plugin-sdk/common"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
	"github.com/hashicorp/packer-plugin-sdk/template/config"
	"github.com/hashicorp/packer-plugin-sdk/template/interpolate"

	"github.com/kpreload/kpreload/builder/image"
	"github.com/kpreload/kpreload/builder/image/stage"
	"github.com/kpreload/kpreload/builder/packer-plugin-kpreload/internal/pkrcfg"
)

// Config is the kpreload provisioner's configuration.
type Config struct {
	common.PackerConfig `mapstructure:",squash"`
	// The fields the builder has too: kernels, recipes, caches, remote,
	// early drivers, instance file, kernel command line, binaries.
	pkrcfg.Shared `mapstructure:",squash"`

	// The target's root directory everything is installed under. Defaults to
	// `/`; another directory suits chroot-style builders (`kpreload install
	// --root`, `ldconfig -r` and `systemctl --root` then work on that tree).
	TargetRoot string `mapstructure:"target_root"`
	// The directory on the target the archive is uploaded to; it is removed
	// afterwards. Defaults to `/tmp/kpreload-provision`.
	RemoteStagingDir string `mapstructure:"remote_staging_directory"`
	// Run the install commands through `sudo -n` (for a non-root
	// communicator user). Defaults to false.
	UseSudo bool `mapstructure:"use_sudo"`
	// Only unpack kpreload's files: do not run `kpreload install` on the
	// target, so no kpreload initramfs is built and the boot loader is left
	// as it is. Defaults to false: the install makes the target's GRUB or
	// systemd-boot boot kpreload, and fails the build when it cannot.
	SkipKernelHook bool `mapstructure:"skip_kernel_hook"`

	ctx interpolate.Context
}

// Provisioner is the kpreload Packer provisioner.
type Provisioner struct {
	// Env is the plugin's environment, filled in by its command.
	Env    Env
	config Config
	// stage is stage.Stage; tests replace it.
	stage func(context.Context, stage.Options, string) (*stage.Result, error)
}

var _ packersdk.Provisioner = (*Provisioner)(nil)

// Env is what the plugin's environment says (download and cache directories,
// Docker credentials); the command fills it in.
type Env = pkrcfg.Env

// ArchiveName is the name of the uploaded archive in the remote staging directory.
const ArchiveName = "kpreload.tar.gz"

// ConfigSpec returns the HCL2 schema of Config.
func (p *Provisioner) ConfigSpec() hcldec.ObjectSpec { return p.config.FlatMapstructure().HCL2Spec() }

// Prepare decodes and checks the configuration, reporting every problem at once.
func (p *Provisioner) Prepare(raws ...interface{}) error {
	c := &p.config
	c.Shared.SetEnv(p.Env)
	if err := config.Decode(c, &config.DecodeOpts{
		PluginType:         "kpreload",
		Interpolate:        true,
		InterpolateContext: &c.ctx,
	}, raws...); err != nil {
		return err
	}
	if c.TargetRoot == "" {
		c.TargetRoot = "/"
	}
	if c.RemoteStagingDir == "" {
		c.RemoteStagingDir = "/tmp/kpreload-provision"
	}

	var errs *packersdk.MultiError
	add := func(err error) { errs = packersdk.MultiErrorAppend(errs, err) }
	if len(c.Kernels) == 0 {
		add(errors.New("kernels: name the target's kernel releases, such as 6.1.0-56-cloud-amd64"))
	}
	for _, e := range c.Shared.Prepare() {
		add(e)
	}
	for _, f := range []struct{ field, path string }{
		{"kpreload_binary", c.KpreloadBinary},
		{"init_binary", c.InitBinary},
	} {
		if st, err := os.Stat(f.path); err != nil {
			add(fmt.Errorf("%s: %w (`make build` makes both, static: bin/kpreload and bin/kpreload-init)", f.field, err))
		} else if st.IsDir() {
			add(fmt.Errorf("%s: %s is a directory", f.field, f.path))
		}
	}
	if c.InstanceFile != "" {
		if _, err := os.Stat(c.InstanceFile); err != nil {
			add(fmt.Errorf("instance_file: %w", err))
		}
	}
	for _, f := range []struct{ field, path string }{{"target_root", c.TargetRoot}, {"remote_staging_directory", c.RemoteStagingDir}} {
		if !path.IsAbs(f.path) || strings.ContainsAny(f.path, "'\n") {
			add(fmt.Errorf("%s %q: want an absolute path without quotes or newlines", f.field, f.path))
		}
	}
	if strings.ContainsAny(c.KernelCmdline, "\n\r") {
		add(errors.New("kernel_cmdline: must be one line"))
	}
	if errs != nil && len(errs.Errors) > 0 {
		return errs
	}
	return nil
}

// Provision stages kpreload's files, uploads them and installs them on the target.
func (p *Provisioner) Provision(ctx context.Context, ui packersdk.Ui, comm packersdk.Communicator, _ map[string]interface{}) error {
	c := &p.config
	stageRoot := p.stage
	if stageRoot == nil {
		stageRoot = stage.Stage
	}
	start := time.Now()
	var mu sync.Mutex
	progress := func(msg string) {
		mu.Lock()
		defer mu.Unlock()
		ui.Say(fmt.Sprintf("[%5.1fs] %s", time.Since(start).Seconds(), msg))
	}

	work, err := os.MkdirTemp("", "kpreload-provision-")
	if err != nil {
		return fmt.Errorf("kpreload provisioner: %w", err)
	}
	defer os.RemoveAll(work)
	root := filepath.Join(work, "root")

	ui.Say(fmt.Sprintf("Staging kpreload for kernels %v (recipes %v)", c.Kernels, c.Recipes))
	so := c.StageOptions()
	so.Kernels, so.Cmdline, so.Progress = c.Kernels, c.KernelCmdline, progress
	so.NoInitramfs = true // the hook builds it on the target, from the target's modules
	res, err := stageRoot(ctx, so, root)
	if err != nil {
		return fmt.Errorf("kpreload provisioner: %w", err)
	}
	for _, d := range res.Drivers {
		ui.Message(fmt.Sprintf("driver %s %s (%s) for %s: set %.12s", d.Driver, d.Version, d.Recipe, d.Kernel, d.SetID))
	}

	archive := filepath.Join(work, ArchiveName)
	units, err := writeArchive(archive, root)
	if err != nil {
		return fmt.Errorf("kpreload provisioner: %w", err)
	}
	f, err := os.Open(archive)
	if err != nil {
		return fmt.Errorf("kpreload provisioner: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("kpreload provisioner: %w", err)
	}
	// The staging directory belongs to the communicator's user (no sudo), so
	// that the upload, which runs as that user, can write into it; only the
	// install runs through sudo.
	if err := p.runAs(ctx, ui, comm, StagingScript(c.RemoteStagingDir), false); err != nil {
		return fmt.Errorf("kpreload provisioner: make the remote staging directory: %w", err)
	}
	remote := path.Join(c.RemoteStagingDir, ArchiveName)
	progress(fmt.Sprintf("upload %s (%d MiB) to %s", ArchiveName, fi.Size()>>20, remote))
	if err := comm.Upload(remote, f, &fi); err != nil {
		return fmt.Errorf("kpreload provisioner: upload %s: %w", remote, err)
	}
	progress("install on the target")
	if err := p.run(ctx, ui, comm, InstallScript(c.TargetRoot, c.RemoteStagingDir, units, c.Kernels, !c.SkipKernelHook)); err != nil {
		return fmt.Errorf("kpreload provisioner: install on the target: %w", err)
	}
	ui.Say(fmt.Sprintf("kpreload installed on the target in %.1fs", time.Since(start).Seconds()))
	return nil
}

// run runs a shell command on the target (through sudo -n when configured),
// streaming its output to the UI; a non-zero exit status is an error.
func (p *Provisioner) run(ctx context.Context, ui packersdk.Ui, comm packersdk.Communicator, script string) error {
	return p.runAs(ctx, ui, comm, script, p.config.UseSudo)
}

// runAs runs a shell command on the target, through sudo -n when sudo is set.
func (p *Provisioner) runAs(ctx context.Context, ui packersdk.Ui, comm packersdk.Communicator, script string, sudo bool) error {
	cmd := "sh -c " + shellQuote(script)
	if sudo {
		cmd = "sudo -n " + cmd
	}
	rc := &packersdk.RemoteCmd{Command: cmd}
	if err := rc.RunWithUi(ctx, comm, ui); err != nil {
		return err
	}
	if st := rc.ExitStatus(); st != 0 {
		return fmt.Errorf("remote command exited with status %d (its output is above)", st)
	}
	return nil
}

// StagingScript makes the upload directory as the communicator's user and
// checks that it can write there (a directory left by an earlier run as
// another user would make the upload fail with "Permission denied").
func StagingScript(staging string) string {
	q := shellQuote(staging)
	return "set -eu\nmkdir -p " + q + "\nchmod 700 " + q + "\n" +
		"[ -w " + q + " ] || { echo \"kpreload: the staging directory \"" + q + "\" is not writable by $(id -un): remove it or set remote_staging_directory\" >&2; exit 2; }\n"
}

// InstallScript is the shell script the provisioner runs on the target: it
// unpacks the uploaded archive into root (a root other than / through
// "kpreload copy-in", so that every path is resolved inside it), runs ldconfig, enables the staged
// systemd units and, when boot is set, runs "kpreload install" for the
// kernels (the uploaded kpreload, not the root's copy, for a root other than /), which makes the root's boot loader boot kpreload and fails when
// it cannot. Into "/" it runs only as root (use_sudo for a non-root
// communicator user). Every failure names what to do.
func InstallScript(root, staging string, units, kernels []string, boot bool) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("set -eu")
	w("root=%s", shellQuote(root))
	w("staging=%s", shellQuote(staging))
	w(`trap 'rm -rf "$staging"' EXIT`)
	w(`[ -d "$root" ] || { echo "kpreload: target root $root does not exist" >&2; exit 2; }`)
	if root == "/" {
		// The running system's own files, boot loader and initramfs: a
		// non-root communicator user gets one clear error, not tar's
		// "Permission denied" for every file.
		w(`[ "$(id -u)" = 0 ] || { echo "kpreload: installing into / needs root, and the install runs as $(id -un): set use_sudo = true (for a user with passwordless sudo) or log in as root" >&2; exit 2; }`)
	}
	w(`command -v tar >/dev/null || { echo "kpreload: the target has no tar" >&2; exit 2; }`)
	if root == "/" {
		// Nothing is outside "/": tar unpacks straight into it.
		w(`tar -xzf "$staging/%s" -C "$root" --no-overwrite-dir`, ArchiveName)
	} else {
		// tar follows the links of an existing tree: unpack beside it, then
		// copy in with every path resolved inside the root (kpreload copy-in).
		w(`mkdir "$staging/tree"`)
		w(`tar -xzf "$staging/%s" -C "$staging/tree"`, ArchiveName)
		w(`"$staging/tree/%s" copy-in --root "$root" "$staging/tree"`, image.ImageKpreload)
	}
	w(`echo "kpreload: unpacked into $root"`)
	w(`if command -v ldconfig >/dev/null; then ldconfig -r "$root"; else echo "kpreload: warning: no ldconfig on the target" >&2; fi`)
	if len(units) > 0 {
		quoted := make([]string, len(units))
		for i, u := range units {
			quoted[i] = shellQuote(u)
		}
		w(`if command -v systemctl >/dev/null; then`)
		w(`  if [ "$root" = / ]; then systemctl enable %s; else systemctl --root="$root" enable %s; fi`, strings.Join(quoted, " "), strings.Join(quoted, " "))
		w(`else echo "kpreload: warning: no systemctl on the target: units %s not enabled" >&2; fi`, strings.Join(units, " "))
	}
	if boot {
		// kpreload itself, never a program of a root other than /: the copy
		// unpacked beside it (install runs the root's own update-grub only
		// in its sandbox).
		bin := `"$root/` + image.ImageKpreload + `"`
		if root != "/" {
			bin = `"$staging/tree/` + image.ImageKpreload + `"`
		}
		args := []string{bin, "install", `--root "$root"`}
		for _, k := range kernels {
			args = append(args, "--kernel", shellQuote(k))
		}
		w("%s", strings.Join(args, " "))
	}
	w(`echo "kpreload: install done"`)
	return b.String()
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// writeArchive writes the tree at root as a gzip tar (owned by root, modes
// and symlinks kept) and returns the systemd units it holds, to enable.
func writeArchive(dst, root string) (units []string, err error) {
	f, err := os.Create(dst)
	if err != nil {
		return nil, fmt.Errorf("create archive: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("write archive: %w", cerr)
		}
	}()
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "root", "root"
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, src)
			src.Close()
			if err != nil {
				return err
			}
			if u, ok := stage.UnitName(hdr.Name); ok {
				units = append(units, u)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w", root, err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("write archive: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("write archive: %w", err)
	}
	slices.Sort(units)
	return slices.Compact(units), nil
}
