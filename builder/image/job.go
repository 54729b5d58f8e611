package image

import (
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kpreload/kpreload/builder/image/disk"
)

// Phase is one phase of an image build: Build runs a Job's phases one after
// another, the Packer builder runs each as a multistep step.
type Phase struct {
	// Name is the phase's short name ("prepare", "drivers", "rootfs", ...).
	Name string
	// Title says in a few words what the phase does, for a UI.
	Title string
	// Run does the phase's work; when ctx is done before or while it runs,
	// it stops and returns an error that wraps ctx's.
	Run func(ctx context.Context) error
	// Cleanup removes what Run made that the finished image does not need
	// (work files, temporary outputs) and, when failed is set (this or a
	// later phase failed, or the build was cancelled), the outputs Run put
	// into place; it never removes a file that was there before the build.
	// It is called once for each phase whose Run was called, in reverse
	// order, after the last Run.
	Cleanup func(failed bool)
}

// Phase names, in the order a Job runs them.
const (
	// PhasePrepare checks the options, the tools and the kernels and makes
	// the work and temporary output directories.
	PhasePrepare = "prepare"
	// PhaseDrivers makes sure the module cache holds every cell the image
	// needs: pulled from Options.Stage.Remote or built with dkms (Stage.BuildMissing).
	PhaseDrivers = "drivers"
	// PhaseRootfs makes the root filesystem: mmdebstrap or the cached
	// tarball, unpacked into the work directory.
	PhaseRootfs = "rootfs"
	// PhaseInitramfs stages kpreload into the root (stage.Stage: the module cache
	// subset, userspace, firmware, binaries, hooks) and builds the kpreload
	// initramfs of each kernel.
	PhaseInitramfs = "initramfs"
	// PhaseConfigure configures the root: extra files, fstab, identity,
	// cloud-init and the units to enable.
	PhaseConfigure = "configure"
	// PhaseBootloader lays out the boot loader: systemd-boot's or GRUB's
	// files for the ESP (and GRUB's core.img), Secure Boot's key files.
	PhaseBootloader = "bootloader"
	// PhaseDisk writes the raw GPT disk: the ESP and the root filesystem.
	PhaseDisk = "disk"
	// PhaseFormats writes each requested format and the manifest, and moves
	// every output into the output directory.
	PhaseFormats = "formats"
)

// Job is one image build split into its phases (Phases); what one phase makes
// for the next lives here. Build runs a Job from start to end.
type Job struct {
	// Tools are the external programs the phases run: the real ones
	// (DefaultTools) from NewJob; a test sets fakes before the phases run.
	Tools Tools

	o Options

	start     time.Time
	moduleKey *x509.Certificate
	madeDirs  []string // the output directory and parents prepare made, deepest first
	work      string   // work directory: the root, the ESP's files
	outTmp    string   // temporary directory in OutDir for the outputs
	m         *Manifest
	espVol    string
	root      string
	esp       []disk.File
	coreImg   string
	raw       string   // the raw disk in outTmp
	outputs   []string // temporary paths of the formats, in Files order
	placed    []string // final paths of the outputs renamed into OutDir
	// aside holds earlier files the outputs replaced: {moved to, final path}.
	aside [][2]string
	done  bool
}

// NewJob returns the build of the image o describes (resolved: Options.Resolve);
// nothing happens until its phases run.
func NewJob(o Options) *Job {
	return &Job{Tools: DefaultTools(), o: o.Resolve()}
}

// Options returns the job's options, resolved.
func (j *Job) Options() Options { return j.o }

// Manifest returns the built image's manifest once the last phase has run,
// else nil.
func (j *Job) Manifest() *Manifest {
	if !j.done {
		return nil
	}
	return j.m
}

// Phases returns the job's phases in the order they must run.
func (j *Job) Phases() []Phase {
	noCleanup := func(bool) {}
	return []Phase{
		{PhasePrepare, "checks, work and temporary output directories", j.guard(j.prepare), j.cleanupPrepare},
		{PhaseDrivers, "driver cells: cache, registry or dkms", j.guard(j.drivers), noCleanup},
		{PhaseRootfs, "root filesystem: mmdebstrap or the cached tarball", j.guard(j.rootfs), j.cleanupRootfs},
		{PhaseInitramfs, "kpreload's files and each kernel's initramfs", j.guard(j.initramfs), noCleanup},
		{PhaseConfigure, "files, fstab, identity, cloud-init, units", j.guard(j.configure), noCleanup},
		{PhaseBootloader, string(j.o.Boot.Loader) + " files for the ESP", j.guard(j.bootloader), j.cleanupBootloader},
		{PhaseDisk, "raw GPT disk", j.guard(j.disk), j.cleanupDisk},
		{PhaseFormats, strings.Join(j.o.Formats, ", ") + " and the manifest", j.guard(j.formats), j.cleanupFormats},
	}
}

// RunPhases runs phases in order until one fails or ctx is done, then the
// Cleanup of every phase that ran, in reverse order (with failed set unless
// all of them succeeded). It returns the failed phase's error, or ctx's
// error, wrapped, when the build was cancelled between phases.
func RunPhases(ctx context.Context, phases []Phase) (err error) {
	var ran []Phase
	defer func() {
		for _, p := range slices.Backward(ran) {
			if p.Cleanup != nil {
				p.Cleanup(err != nil)
			}
		}
	}()
	for _, p := range phases {
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("image: cancelled before %s: %w", p.Name, cerr)
		}
		ran = append(ran, p)
		if err := p.Run(ctx); err != nil {
			return err
		}
	}
	return nil
}

// tools returns the job's tools, the real ones where none were set.
func (j *Job) tools() Tools { return j.Tools.orDefault() }

// guard makes a phase refuse to start once ctx is done.
func (j *Job) guard(run func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("image %s: %w", j.o.Name, err)
		}
		return run(ctx)
	}
}
