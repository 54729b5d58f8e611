// Package kpreloadbuilder is the kpreload Packer builder (`source "kpreload"`):
// it builds a bootable golden image offline, with no VM, through
// builder/image: a Debian root filesystem, the driver module cache for the
// image's kernels (building missing cells with the real dkms), each driver
// version's userspace, the kpreload initramfs per kernel and a UEFI bootloader,
// written as raw and qcow2 disks with a manifest. Each phase of the image
// build (image.Job: prepare, drivers, rootfs, initramfs, configure,
// bootloader, disk, formats) runs as its own multistep step, so Packer's
// cancellation stops the build between and inside phases and each step's
// Cleanup removes what its phase made.
package kpreloadbuilder

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/packer-plugin-sdk/multistep"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/kpreload/kpreload/builder/image"
	"github.com/kpreload/kpreload/builder/packer-plugin-kpreload/internal/pkrcfg"
)

// BuilderID identifies the kpreload builder's artifacts.
const BuilderID = "kpreload.image"

// Builder is the kpreload Packer builder.
type Builder struct {
	// Env is the plugin's environment, filled in by its command.
	Env    Env
	config Config
	runner multistep.Runner
}

var _ packersdk.Builder = (*Builder)(nil)

// Env is what the plugin's environment says (download and cache directories,
// Docker credentials); the command fills it in.
type Env = pkrcfg.Env

// ConfigSpec returns the HCL2 schema of Config.
func (b *Builder) ConfigSpec() hcldec.ObjectSpec { return b.config.FlatMapstructure().HCL2Spec() }

// Prepare decodes and checks the configuration; every problem is reported at once.
func (b *Builder) Prepare(raws ...interface{}) (generatedVars []string, warnings []string, err error) {
	b.config.Shared.SetEnv(b.Env)
	warnings, err = b.config.Prepare(raws...)
	if err != nil {
		return nil, warnings, err
	}
	return []string{"ImageName", "ManifestPath"}, warnings, nil
}

// Run builds the image and returns its artifact: the output directory, then
// each phase of the image build (image.Job.Phases) as its own step, then the
// artifact.
func (b *Builder) Run(ctx context.Context, ui packersdk.Ui, hook packersdk.Hook) (packersdk.Artifact, error) {
	start := time.Now()
	opts := b.config.Options()
	var mu sync.Mutex
	opts.Progress = func(msg string) {
		mu.Lock()
		defer mu.Unlock()
		ui.Say(fmt.Sprintf("[%5.1fs] %s", time.Since(start).Seconds(), msg))
	}
	job := image.NewJob(opts)

	state := new(multistep.BasicStateBag)
	state.Put("config", &b.config)
	state.Put("hook", hook)
	state.Put("ui", ui)
	state.Put("job", job)
	state.Put("start", start)

	steps := buildSteps(&b.config, job)
	ui.Say(fmt.Sprintf("Building image %s (kernels %v, recipes %v) into %s", opts.Name, opts.Kernels, recipeNames(&b.config), opts.OutDir))
	b.runner = newRunner(steps, b.config.PackerConfig, ui)
	b.runner.Run(ctx, state)

	if err, ok := state.GetOk("error"); ok {
		return nil, err.(error)
	}
	if _, ok := state.GetOk(multistep.StateCancelled); ok {
		return nil, errors.New("build was cancelled")
	}
	if _, ok := state.GetOk(multistep.StateHalted); ok {
		return nil, errors.New("build was halted")
	}
	a, ok := state.GetOk("artifact")
	if !ok {
		return nil, errors.New("build finished without an artifact")
	}
	return a.(*Artifact), nil
}

// buildSteps returns the build's steps: the output directory, one step per
// phase of job (jobPhases), in its order, then the artifact.
func buildSteps(c *Config, job *image.Job) []multistep.Step {
	steps := []multistep.Step{&stepOutputDir{force: c.PackerForce, path: c.OutputDir}}
	for _, p := range jobPhases(job) {
		steps = append(steps, &stepPhase{phase: p})
	}
	return append(steps, &stepArtifact{})
}
