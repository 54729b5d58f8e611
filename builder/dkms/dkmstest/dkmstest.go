// Package dkmstest is a fake dkms.Driver for the builder's tests and
// benchmarks: it "builds" a cell by copying module files the test made (a
// synthetic module per kernel, say) into the build's work directory, and
// fails the builds the test says, as dkms fails a compile.
package dkmstest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/kpreload/kpreload/builder/buildroot"
	"github.com/kpreload/kpreload/builder/dkms"
	"github.com/kpreload/kpreload/internal/fileutil"
)

// FirstError is the compiler error line of a failed fake build.
const FirstError = "fake.c:1:1: error: expected ';' before '}' token"

// Driver is the fake dkms.
type Driver struct {
	// Modules returns the module files a build for kernel yields.
	Modules func(kernel string) ([]string, error)
	// Fail, if set, says whether the build of req fails to compile.
	Fail func(req dkms.BuildRequest) bool
	// Exclusive, if set, says whether req's kernel is excluded by
	// BUILD_EXCLUSIVE (dkms.ErrBuildExclusive).
	Exclusive func(req dkms.BuildRequest) bool

	mu   sync.Mutex
	reqs []dkms.BuildRequest
}

// Version implements dkms.Driver.
func (d *Driver) Version(ctx context.Context, root *buildroot.Root) (string, error) {
	return "dkmstest", nil
}

// Requests returns the builds asked for so far.
func (d *Driver) Requests() []dkms.BuildRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]dkms.BuildRequest(nil), d.reqs...)
}

// Build implements dkms.Driver.
func (d *Driver) Build(ctx context.Context, req dkms.BuildRequest) (*dkms.BuildResult, error) {
	d.mu.Lock()
	d.reqs = append(d.reqs, req)
	d.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(req.WorkDir, "module"), 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(req.WorkDir, "make.log")
	if d.Exclusive != nil && d.Exclusive(req) {
		return nil, fmt.Errorf("fake %s: %w", req.Kernel, dkms.ErrBuildExclusive)
	}
	if d.Fail != nil && d.Fail(req) {
		if err := os.WriteFile(logPath, []byte("CC fake.o\n"+FirstError+"\nmake: *** Error 1\n"), 0o644); err != nil {
			return nil, err
		}
		return nil, &dkms.BuildError{Name: "fake", Version: "1.0", Kernel: req.Kernel, ExitCode: 10, LogPath: logPath, FirstError: FirstError, Err: errors.New("exit status 10")}
	}
	if err := os.WriteFile(logPath, []byte("CC fake.o\nLD fake.ko\n"), 0o644); err != nil {
		return nil, err
	}
	if d.Modules == nil {
		return nil, errors.New("dkmstest: no Modules")
	}
	files, err := d.Modules(req.Kernel)
	if err != nil {
		return nil, err
	}
	var mods []string
	for _, f := range files {
		dst := filepath.Join(req.WorkDir, "module", filepath.Base(f))
		if err := fileutil.CopyFile(f, dst, 0o644); err != nil {
			return nil, err
		}
		mods = append(mods, dst)
	}
	return &dkms.BuildResult{Kernel: req.Kernel, Modules: mods, LogPath: logPath}, nil
}
