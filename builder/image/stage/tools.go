package stage

import (
	"context"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/builder/internal/runner"
)

// Tools are the programs Stage runs, each behind its own small interface.
type Tools struct {
	// Dpkg unpacks the userspace and firmware packages.
	Dpkg Dpkg
	// Userspace builds a recipe's userspace source.
	Userspace Userspace
}

// orDefault returns t with each tool it lacks the real one (Host, run by
// runner.Default).
func (t Tools) orDefault() Tools {
	if t.Dpkg == nil {
		t.Dpkg = Host{}
	}
	if t.Userspace == nil {
		t.Userspace = Host{}
	}
	return t
}

// Dpkg unpacks Debian packages.
type Dpkg interface {
	// Extract unpacks deb's files into dir (dpkg -x).
	Extract(ctx context.Context, deb, dir string) error
}

// Userspace builds a driver's userspace from source.
type Userspace interface {
	// CopySource copies the source tree src into the empty directory dst,
	// following links.
	CopySource(ctx context.Context, src, dst string) error
	// MakeInstall runs make VERSION=version DESTDIR=destdir install in dir.
	MakeInstall(ctx context.Context, dir, version, destdir string) error
}

// Host is the real tools, run by Runner (nil: runner.Default).
type Host struct{ Runner runner.Runner }

func (h Host) run(ctx context.Context, c runner.Cmd) error {
	_, err := runner.Or(h.Runner).Run(ctx, c)
	return err
}

// Extract implements Dpkg.
func (h Host) Extract(ctx context.Context, deb, dir string) error {
	return archive.ExtractWith(ctx, runner.Or(h.Runner), deb, dir)
}

// CopySource implements Userspace.
func (h Host) CopySource(ctx context.Context, src, dst string) error {
	return h.run(ctx, runner.Cmd{Name: "cp", Args: []string{"-rL", src + "/.", dst}})
}

// MakeInstall implements Userspace.
func (h Host) MakeInstall(ctx context.Context, dir, version, destdir string) error {
	return h.run(ctx, runner.Cmd{Name: "make", Args: []string{"-C", dir, "VERSION=" + version, "DESTDIR=" + destdir, "install"}})
}
