package image

import (
	"context"
	"fmt"
	"strings"

	"github.com/kpreload/kpreload/builder/image/rootfs"
)

// configure copies the extra files into the root (after kpreload's, so they
// may replace a configuration file), writes fstab and root's password, resets
// the machine's identity and sets up cloud-init and the units to enable.
func (j *Job) configure(ctx context.Context) error {
	o, root := j.o.Rootfs, j.root
	if err := rootfs.AddFiles(root, o.Files); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if err := rootfs.Configure(ctx, j.tools().Systemctl, root, j.m.RootUUID, j.m.ESPUUID, o.EmptyRootPassword, !j.o.Plain); err != nil {
		return fmt.Errorf("image: configure root: %w", err)
	}
	if err := rootfs.ResetIdentity(ctx, j.tools().Systemctl, root); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if o.CloudInit {
		if err := rootfs.ConfigureCloudInit(root); err != nil {
			return fmt.Errorf("image: %w", err)
		}
	}
	if len(o.Enable) > 0 {
		j.o.Progress.say("rootfs: enabling %s", strings.Join(o.Enable, ", "))
		if err := j.tools().Systemctl.Enable(ctx, root, o.Enable...); err != nil {
			return fmt.Errorf("image: enable %s: %w", strings.Join(o.Enable, " "), err)
		}
	}
	return nil
}
