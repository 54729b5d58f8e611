// Package adopt puts kpreload into a root filesystem that another tool made
// (diskimage-builder, vmdb2, FAI, a cloud's own image), on this machine: what
// the Packer provisioner does on its target, through the same code. Stage
// (builder/image/stage) fills a scratch tree with kpreload's files for the
// root's kernels, which is copied into the root with every path resolved
// inside it (internal/inroot, as "kpreload copy-in" does for the
// provisioner); then ldconfig and "systemctl enable" of the staged units run
// in the root, and builder/install makes the root's boot loader boot
// kpreload. Image does the same for a disk image file, mounting its root
// partition at its offset.
package adopt

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/kpreload/kpreload/builder/image/stage"
	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/builder/internal/sandbox"
	"github.com/kpreload/kpreload/internal/inroot"
)

// Options says what to put into a root and how to install it.
type Options struct {
	// Stage is what is staged, as for the Packer provisioner: the recipes,
	// the module cache and registry the cells come from, the binaries, the
	// instance file, the registry configuration and command line baked in.
	// Kernels empty means every kernel the root holds with its modules.
	// NoInitramfs is always set: install builds each kernel's initramfs
	// from the root's own module tree.
	Stage stage.Options
	// Install is how the root is then installed; its Root and Kernels are
	// set by Root.
	Install install.Options
	// Runner runs ldconfig and systemctl (nil: runner.Default).
	Runner runner.Runner
	// Log receives one line per step (nil: discarded).
	Log io.Writer
}

// Result says what Root did.
type Result struct {
	// Kernels are the kernels kpreload was staged and installed for.
	Kernels []string `json:"kernels"`
	// Staged is what Stage put into the root.
	Staged *stage.Result `json:"staged"`
	// Units are the systemd units enabled in the root.
	Units []string `json:"units"`
	// Install is install.Install's result.
	Install *install.Result `json:"install"`
}

func (o *Options) logf(format string, a ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, "kpreload: "+format+"\n", a...)
	}
}

// RootKernels returns the kernels of root that have both an image and a
// module tree: what Root stages and installs for when none are named.
func RootKernels(root string) ([]string, error) {
	all, err := install.Kernels(root)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, k := range all {
		if k.Modules && k.Image {
			out = append(out, k.Release)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no kernel (boot/vmlinuz-<release> with lib/modules/<release>/modules.dep): install a linux-image package into it first", root)
	}
	return out, nil
}

// Root puts kpreload into the root filesystem at root and makes it boot
// kpreload: Stage into a scratch tree (without initramfs images), the
// tree copied into root confined to it (inroot.CopyTree), ldconfig in the
// root, the staged systemd units enabled (kpreload-boot-ok.service among
// them, which takes GRUB's one-shot fallback back once a boot comes up),
// then install.Install for the kernels. It stops at the first failure; what
// was copied in stays (kpreload's own paths: running it again replaces
// them).
func Root(ctx context.Context, root string, o Options) (*Result, error) {
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("root %s is not a directory", root)
	}
	kernels := o.Stage.Kernels
	if len(kernels) == 0 {
		var err error
		if kernels, err = RootKernels(root); err != nil {
			return nil, err
		}
	}
	for _, k := range kernels {
		if err := install.CheckRelease(k); err != nil {
			return nil, err
		}
	}
	work, err := os.MkdirTemp("", "kpreload-adopt-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	tree := filepath.Join(work, "tree")

	so := o.Stage
	so.Kernels = kernels
	// As the provisioner: the initramfs is built by install, from the
	// root's own module tree.
	so.NoInitramfs = true
	o.logf("staging kpreload for kernels %v", kernels)
	staged, err := stage.Stage(ctx, so, tree)
	if err != nil {
		return nil, err
	}
	units, err := stage.Units(tree)
	if err != nil {
		return nil, fmt.Errorf("stage: %w", err)
	}
	o.logf("copying kpreload's files into %s", root)
	if err := inroot.CopyTree(root, "/", tree); err != nil {
		return nil, fmt.Errorf("copy kpreload's files into %s: %w", root, err)
	}
	r := runner.Or(o.Runner)
	if err := ldconfig(ctx, r, root, o.Log); err != nil {
		return nil, err
	}
	if err := enable(ctx, r, root, units, o.Log); err != nil {
		return nil, err
	}
	if len(units) > 0 {
		o.logf("enabled %v", units)
	}
	iopts := o.Install
	iopts.Root, iopts.Kernels = root, kernels
	if iopts.Log == nil {
		iopts.Log = o.Log
	}
	res, err := install.Install(ctx, iopts)
	if err != nil {
		return nil, err
	}
	return &Result{Kernels: kernels, Staged: staged, Units: units, Install: res}, nil
}

// ldconfig updates the root's linker cache (the driver userspace's
// /etc/ld.so.conf.d entry) with the root's own ldconfig, in its sandbox;
// a root without one gets a warning, as on the provisioner's target.
func ldconfig(ctx context.Context, r runner.Runner, root string, log io.Writer) error {
	bin := ""
	for _, p := range []string{"usr/sbin/ldconfig", "sbin/ldconfig"} {
		if fi, err := inroot.Stat(root, p); err == nil && fi.Mode().IsRegular() {
			bin = "/" + p
			break
		}
	}
	if bin == "" {
		if log != nil {
			fmt.Fprintf(log, "kpreload: warning: %s has no ldconfig: its linker cache was not updated\n", root)
		}
		return nil
	}
	if _, err := sandbox.Run(ctx, r, sandbox.Spec{Root: root, Argv: []string{bin}, Log: log}); err != nil {
		return fmt.Errorf("ldconfig in %s: %w", root, err)
	}
	return nil
}

// enable enables units in the root (systemctl --root, which resolves every
// path inside it); a machine without systemctl gets a warning, as on the
// provisioner's target.
func enable(ctx context.Context, r runner.Runner, root string, units []string, log io.Writer) error {
	if len(units) == 0 {
		return nil
	}
	if _, err := r.LookPath("systemctl"); err != nil {
		if log != nil {
			fmt.Fprintf(log, "kpreload: warning: no systemctl on this machine: units %v not enabled in %s\n", units, root)
		}
		return nil
	}
	args := append([]string{"--root=" + root, "enable"}, units...)
	_, err := r.Run(ctx, runner.Cmd{Name: "systemctl", Args: args, Log: log})
	if err != nil {
		return fmt.Errorf("enable %v in %s: %w", units, root, err)
	}
	return nil
}
