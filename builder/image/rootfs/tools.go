package rootfs

import (
	"context"
	"strings"

	"github.com/kpreload/kpreload/builder/internal/runner"
)

// Tools are the programs Tarball runs.
type Tools struct {
	// Runner finds mmdebstrap.
	Runner runner.Runner
	// Mmdebstrap makes the tarball.
	Mmdebstrap Mmdebstrap
	// Dpkg builds the stand-in initramfs tool's package.
	Dpkg Dpkg
}

// Mmdebstrap makes a Debian root filesystem.
type Mmdebstrap interface {
	// Mmdebstrap runs mmdebstrap with args (MmdebstrapArgs).
	Mmdebstrap(ctx context.Context, args []string) error
	// Unpack unpacks a root filesystem tarball into dir as it is (owners,
	// modes, device nodes, extended attributes).
	Unpack(ctx context.Context, tarball, dir string) error
}

// Dpkg is dpkg's package building and database.
type Dpkg interface {
	// BuildDeb builds the package tree dir into deb (dpkg-deb --build).
	BuildDeb(ctx context.Context, dir, deb string) error
	// InstalledVersion is the version of pkg in the dpkg database admindir.
	InstalledVersion(ctx context.Context, admindir, pkg string) (string, error)
}

// Systemctl is systemctl on a root that is not running.
type Systemctl interface {
	// Enable enables units in root (systemctl --root=root enable).
	Enable(ctx context.Context, root string, units ...string) error
	// Preset applies the preset files to units in root.
	Preset(ctx context.Context, root string, units ...string) error
}

// Host is the real tools, run by Runner.
type Host struct{ Runner runner.Runner }

func (h Host) run(ctx context.Context, c runner.Cmd) error {
	_, err := runner.Or(h.Runner).Run(ctx, c)
	return err
}

// Mmdebstrap implements Mmdebstrap.
func (h Host) Mmdebstrap(ctx context.Context, args []string) error {
	return h.run(ctx, runner.Cmd{Name: "mmdebstrap", Args: args})
}

// Unpack implements Mmdebstrap.
func (h Host) Unpack(ctx context.Context, tarball, dir string) error {
	return h.run(ctx, runner.Cmd{Name: "tar", Args: []string{"-x", "-p", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-f", tarball, "-C", dir}})
}

// BuildDeb implements Dpkg.
func (h Host) BuildDeb(ctx context.Context, dir, deb string) error {
	return h.run(ctx, runner.Cmd{Name: "dpkg-deb", Args: []string{"--root-owner-group", "--build", dir, deb}})
}

// InstalledVersion implements Dpkg.
func (h Host) InstalledVersion(ctx context.Context, admindir, pkg string) (string, error) {
	out, err := runner.Or(h.Runner).Run(ctx, runner.Cmd{Name: "dpkg-query", Args: []string{"--admindir=" + admindir, "-W", "-f=${Version}", pkg}})
	return strings.TrimSpace(string(out)), err
}

// Enable implements Systemctl.
func (h Host) Enable(ctx context.Context, root string, units ...string) error {
	return h.run(ctx, runner.Cmd{Name: "systemctl", Args: append([]string{"--root=" + root, "enable"}, units...)})
}

// Preset implements Systemctl.
func (h Host) Preset(ctx context.Context, root string, units ...string) error {
	return h.run(ctx, runner.Cmd{Name: "systemctl", Args: append([]string{"--root=" + root, "preset"}, units...)})
}

// HostTools are the real tools run by the builder's default runner, for
// callers outside the builder (tests that make roots of their own).
func HostTools() Tools {
	h := Host{Runner: runner.Default}
	return Tools{Runner: runner.Default, Mmdebstrap: h, Dpkg: h}
}
