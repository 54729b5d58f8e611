package formats

import (
	"context"

	"github.com/kpreload/kpreload/builder/internal/runner"
)

// Host is the real qemu-img, run by Runner.
type Host struct{ Runner runner.Runner }

// Convert implements QemuImg.
func (h Host) Convert(ctx context.Context, format string, options []string, raw, out string) error {
	args := []string{"convert", "-f", "raw", "-O", format}
	for _, o := range options {
		args = append(args, "-o", o)
	}
	_, err := runner.Or(h.Runner).Run(ctx, runner.Cmd{Name: "qemu-img", Args: append(args, raw, out)})
	return err
}
