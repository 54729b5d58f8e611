package pid1

import (
	"io"
	"os"
	"path/filepath"

	"github.com/kpreload/kpreload/live/loader"
	"github.com/kpreload/kpreload/report"
)

// NewRoot is where the real /init mounts the root filesystem before switch_root.
const NewRoot = "/newroot"

// Options are the roots one boot reads and writes under and the system calls
// it makes, every field needed: /init passes the running system's
// (RealOptions), tests fixture trees and fakes.
type Options struct {
	// SysDir, ProcDir, DevDir and RunDir are where sysfs, procfs, devtmpfs
	// and the run tmpfs are mounted ("/sys", "/proc", "/dev", "/run").
	SysDir, ProcDir, DevDir, RunDir string
	// Initramfs is the initramfs's own root ("/"): its boot index under
	// lib/modules, its copy of the image's instance file, its firmware and
	// its emergency shell.
	Initramfs string
	// NewRoot is where the root filesystem is mounted before switch_root.
	NewRoot string
	// FirmwareParam is the kernel's custom firmware search path parameter
	// (module/firmware_class/parameters/path under SysDir).
	FirmwareParam string
	// ReportPath is where the report is written (report.Path).
	ReportPath string
	// SeedMount is where a cloud-init seed is mounted while it is read.
	SeedMount string
	// Console receives /init's messages until DevDir's console opens.
	Console io.Writer
	// System makes the system calls a test cannot make.
	System System
	// Kernel loads modules (loader.System).
	Kernel loader.Kernel
	// IsolateDrivers loads driver sets in a forked child under a deadline
	// (loader.Loader.Isolate), whose finit_module is the kernel's own:
	// tests, whose Kernel is a fake, leave it off.
	IsolateDrivers bool
	// Now returns seconds since the kernel started.
	Now func() float64
}

// RealOptions returns the running system's roots and system calls, as /init
// uses them; environ is the environment the kernel gave /init (os.Environ(),
// read in its main), which the real init gets too.
func RealOptions(environ []string) Options {
	return Options{
		SysDir: "/sys", ProcDir: "/proc", DevDir: "/dev", RunDir: "/run",
		Initramfs:      "/",
		NewRoot:        NewRoot,
		FirmwareParam:  "/sys/module/firmware_class/parameters/path",
		ReportPath:     report.Path,
		SeedMount:      SeedMount,
		Console:        os.Stdout,
		System:         realSystem{env: environ},
		Kernel:         loader.System{},
		IsolateDrivers: true,
		Now:            Now,
	}
}

// initramfsPath returns path (absolute, as in the initramfs) under the initramfs root.
func (b *Boot) initramfsPath(path string) string { return filepath.Join(b.o.Initramfs, path) }

// sysPath returns a path under /sys (as the kernel documents it) under SysDir.
func (b *Boot) sysPath(path string) string {
	rel, _ := filepath.Rel("/sys", path)
	return filepath.Join(b.o.SysDir, rel)
}
