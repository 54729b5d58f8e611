package bootloader

import (
	"context"

	"github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/builder/internal/sandbox"
)

// Tools are the programs the boot loaders' setup runs, each behind its own
// small interface.
type Tools struct {
	// Runner finds the programs (virt-fw-vars).
	Runner runner.Runner
	// Grub runs the root's own GRUB tools.
	Grub Grub
	// VirtFwVars writes OVMF variable stores.
	VirtFwVars VirtFwVars
}

// Grub is the GRUB tools of a root, run inside it (in its sandbox).
type Grub interface {
	// MkImage runs grub-mkimage with args in root.
	MkImage(ctx context.Context, root string, args ...string) error
	// MkConfig runs grub-mkconfig -o out (a path in root) in root, with
	// the links dev made in its /dev.
	MkConfig(ctx context.Context, root, out string, dev []sandbox.Link) error
}

// VirtFwVars is virt-fw-vars (python3-virt-firmware).
type VirtFwVars interface {
	// AddMOK writes output: the store input with the PEM certificate
	// enrolled as a Machine Owner Key for the shim loader guid.
	AddMOK(ctx context.Context, input, guid, pem, output string) error
}

// Host is the real tools, run by Runner (nil: runner.Default).
type Host struct{ Runner runner.Runner }

func (h Host) run(ctx context.Context, c runner.Cmd) error {
	_, err := runner.Or(h.Runner).Run(ctx, c)
	return err
}

// MkImage implements Grub.
func (h Host) MkImage(ctx context.Context, root string, args ...string) error {
	_, err := sandbox.Run(ctx, h.Runner, sandbox.Spec{Root: root, Argv: append([]string{"grub-mkimage"}, args...)})
	return err
}

// MkConfig implements Grub.
func (h Host) MkConfig(ctx context.Context, root, out string, dev []sandbox.Link) error {
	_, err := sandbox.Run(ctx, h.Runner, sandbox.Spec{Root: root, Argv: []string{"grub-mkconfig", "-o", out}, Links: dev})
	return err
}

// AddMOK implements VirtFwVars.
func (h Host) AddMOK(ctx context.Context, input, guid, pem, output string) error {
	return h.run(ctx, runner.Cmd{Name: "virt-fw-vars", Args: []string{"--input", input, "--add-mok", guid, pem, "--output", output}})
}
