package install

import (
	"context"
	"fmt"
)

// Refresh is `kpreload kernel-hook refresh`, for a kernel that arrived
// before its driver cells: every kernel of the root that has its modules
// but whose driver cells the root's cache lacks is tried again against the
// root's registry (as the postinst hook tries it), each kernel that got
// cells (or had no kpreload initramfs) gets its initramfs built, and the
// boot loader is updated, so that its default is the newest kernel with its
// driver cells. A registry that cannot be reached, or still lacks a cell, is
// a warning, as in the postinst hook: the default stays where it was. Like
// the hooks and Install, it holds the root's HookLock while it runs.
func Refresh(ctx context.Context, o Options) (*Result, error) {
	bl, unlock, err := o.startHook(ctx, "kpreload kernel-hook refresh", true)
	if err != nil {
		return nil, err
	}
	defer unlock()
	kernels, err := Kernels(o.Root)
	if err != nil {
		return nil, err
	}
	var lacking []string
	for _, k := range kernels {
		if k.Modules && len(k.Drivers) == 0 {
			lacking = append(lacking, k.Release)
		}
	}
	var pulled, warnings []string
	if len(lacking) > 0 {
		cfg, err := ReadRemoteConfig(o.Root)
		switch {
		case err != nil:
			warnings = append(warnings, err.Error())
		case cfg == nil:
			warnings = append(warnings, fmt.Sprintf("no registry configured (/%s): the kernels without driver cells stay without them", RemoteFile))
		}
		for _, release := range lacking {
			if err != nil || cfg == nil {
				break
			}
			p, w := o.pullCells(ctx, cfg, release)
			for _, c := range p {
				o.logf("pulled %s for %s", c, release)
				pulled = append(pulled, c+" for "+release)
			}
			warnings = append(warnings, w...)
		}
	} else {
		o.logf("every kernel has its driver cells")
	}
	for _, w := range warnings {
		o.logf("WARNING: %s", w)
	}
	for _, k := range kernels {
		if !k.Modules {
			continue
		}
		if k.Initramfs && len(kernelState(o.Root, k.Release).Sets) == len(k.Sets) {
			continue // unchanged: its initramfs stands
		}
		if _, err := o.buildInitramfs(ctx, k.Release); err != nil {
			return nil, fmt.Errorf("kernel %s: %w", k.Release, err)
		}
	}
	o.stall(ctx, StallBeforeBootloader)
	if err := interrupted(ctx, "the boot loader was not updated"); err != nil {
		return nil, err
	}
	return o.syncPulled(ctx, bl, pulled, warnings)
}
