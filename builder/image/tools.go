package image

import (
	"context"
	"strings"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/builder/image/disk"
	"github.com/kpreload/kpreload/builder/image/formats"
	"github.com/kpreload/kpreload/builder/internal/runner"
)

// Tools are the external programs a Job's phases run, each behind its own
// small interface (as a Packer plugin puts a driver in front of QEMU), all
// over one runner.Runner: NewTools(runner.Exec{}) runs the real programs,
// a unit test's runner records the commands and makes the files they would.
type Tools struct {
	// Runner finds the programs (the prepare phase's checks).
	Runner runner.Runner
	// Mmdebstrap makes the root filesystem tarball and unpacks it.
	Mmdebstrap Mmdebstrap
	// Dpkg builds, queries and unpacks Debian packages.
	Dpkg Dpkg
	// Systemctl enables units in a root.
	Systemctl Systemctl
	// Disk partitions the disk and makes its filesystems.
	Disk disk.Tools
	// Grub runs the root's own GRUB tools.
	Grub Grub
	// QemuImg converts the raw disk to the other formats.
	QemuImg formats.QemuImg
	// Userspace builds a recipe's userspace source.
	Userspace Userspace
	// VirtFwVars writes OVMF variable stores.
	VirtFwVars VirtFwVars
}

// NewTools returns the real tools, run through r.
func NewTools(r runner.Runner) Tools {
	t := hostTools{r}
	return Tools{Runner: r, Mmdebstrap: t, Dpkg: t, Systemctl: t, Disk: disk.Host{Runner: r}, Grub: t, QemuImg: formats.Host{Runner: r}, Userspace: t, VirtFwVars: t}
}

// DefaultTools are the real tools, run by runner.Default.
func DefaultTools() Tools { return NewTools(runner.Default) }

// orDefault returns t, or DefaultTools when t is the zero value.
func (t Tools) orDefault() Tools {
	if t.Runner == nil {
		return DefaultTools()
	}
	return t
}

// Mmdebstrap makes a Debian root filesystem.
type Mmdebstrap interface {
	// Mmdebstrap runs mmdebstrap with args (mmdebstrapArgs).
	Mmdebstrap(ctx context.Context, args []string) error
	// Unpack unpacks a root filesystem tarball into dir as it is (owners,
	// modes, device nodes, extended attributes).
	Unpack(ctx context.Context, tarball, dir string) error
}

// Dpkg is dpkg's package tools.
type Dpkg interface {
	// BuildDeb builds the package tree dir into deb (dpkg-deb --build).
	BuildDeb(ctx context.Context, dir, deb string) error
	// InstalledVersion is the version of pkg in the dpkg database admindir.
	InstalledVersion(ctx context.Context, admindir, pkg string) (string, error)
	// Extract unpacks deb's files into dir (dpkg -x).
	Extract(ctx context.Context, deb, dir string) error
}

// Systemctl is systemctl on a root that is not running.
type Systemctl interface {
	// Enable enables units in root (systemctl --root=root enable).
	Enable(ctx context.Context, root string, units ...string) error
	// Preset applies the preset files to units in root.
	Preset(ctx context.Context, root string, units ...string) error
}

// Grub is the GRUB tools of a root, run inside it (chroot).
type Grub interface {
	// MkImage runs grub-mkimage with args in root.
	MkImage(ctx context.Context, root string, args ...string) error
	// MkConfig runs grub-mkconfig -o out (a path in root) in root.
	MkConfig(ctx context.Context, root, out string) error
}

// Userspace builds a driver's userspace from source.
type Userspace interface {
	// CopySource copies the source tree src into the empty directory dst,
	// following links.
	CopySource(ctx context.Context, src, dst string) error
	// MakeInstall runs make VERSION=version DESTDIR=destdir install in dir.
	MakeInstall(ctx context.Context, dir, version, destdir string) error
}

// VirtFwVars is virt-fw-vars (python3-virt-firmware).
type VirtFwVars interface {
	// AddMOK writes output: the store input with the PEM certificate
	// enrolled as a Machine Owner Key for the shim loader guid.
	AddMOK(ctx context.Context, input, guid, pem, output string) error
}

// hostTools are the real programs, run through a runner.Runner.
type hostTools struct{ r runner.Runner }

// run runs name with args.
func (t hostTools) run(ctx context.Context, c runner.Cmd) error {
	_, err := t.r.Run(ctx, c)
	return err
}

func (t hostTools) Mmdebstrap(ctx context.Context, args []string) error {
	return t.run(ctx, runner.Cmd{Name: "mmdebstrap", Args: args})
}

func (t hostTools) Unpack(ctx context.Context, tarball, dir string) error {
	return t.run(ctx, runner.Cmd{Name: "tar", Args: []string{"-x", "-p", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-f", tarball, "-C", dir}})
}

func (t hostTools) BuildDeb(ctx context.Context, dir, deb string) error {
	return t.run(ctx, runner.Cmd{Name: "dpkg-deb", Args: []string{"--root-owner-group", "--build", dir, deb}})
}

func (t hostTools) InstalledVersion(ctx context.Context, admindir, pkg string) (string, error) {
	out, err := t.r.Run(ctx, runner.Cmd{Name: "dpkg-query", Args: []string{"--admindir=" + admindir, "-W", "-f=${Version}", pkg}})
	return strings.TrimSpace(string(out)), err
}

func (t hostTools) Extract(ctx context.Context, deb, dir string) error {
	return archive.ExtractWith(ctx, t.r, deb, dir)
}

func (t hostTools) Enable(ctx context.Context, root string, units ...string) error {
	return t.run(ctx, runner.Cmd{Name: "systemctl", Args: append([]string{"--root=" + root, "enable"}, units...)})
}

func (t hostTools) Preset(ctx context.Context, root string, units ...string) error {
	return t.run(ctx, runner.Cmd{Name: "systemctl", Args: append([]string{"--root=" + root, "preset"}, units...)})
}

func (t hostTools) MkImage(ctx context.Context, root string, args ...string) error {
	return t.run(ctx, runner.Cmd{Name: "chroot", Args: append([]string{root, "grub-mkimage"}, args...)})
}

func (t hostTools) MkConfig(ctx context.Context, root, out string) error {
	return t.run(ctx, runner.Cmd{Name: "chroot", Args: []string{root, "grub-mkconfig", "-o", out}})
}

func (t hostTools) CopySource(ctx context.Context, src, dst string) error {
	return t.run(ctx, runner.Cmd{Name: "cp", Args: []string{"-rL", src + "/.", dst}})
}

func (t hostTools) MakeInstall(ctx context.Context, dir, version, destdir string) error {
	return t.run(ctx, runner.Cmd{Name: "make", Args: []string{"-C", dir, "VERSION=" + version, "DESTDIR=" + destdir, "install"}})
}

func (t hostTools) AddMOK(ctx context.Context, input, guid, pem, output string) error {
	return t.run(ctx, runner.Cmd{Name: "virt-fw-vars", Args: []string{"--input", input, "--add-mok", guid, pem, "--output", output}})
}
