// Package kpreloadbuilder is the kpreload Packer builder (`source "kpreload"`):
// it builds a bootable golden image offline, with no VM, through
// builder/image: a Debian root filesystem, the driver module cache for the
// image's kernels (building missing cells with the real dkms), each driver
// version's userspace, the kpreload initramfs per kernel and a UEFI bootloader,
// written as raw and qcow2 disks with a manifest.
package kpreloadbuilder

import (
	"context"
	"errors"

	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/packer-plugin-sdk/multistep"
	"github.com/hashicorp/packer-plugin-sdk/multistep/commonsteps"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
)

// BuilderID identifies the kpreload builder's artifacts.
const BuilderID = "kpreload.image"

// Builder is the kpreload Packer builder.
type Builder struct {
	config Config
	runner multistep.Runner
}

var _ packersdk.Builder = (*Builder)(nil)

// ConfigSpec returns the HCL2 schema of Config.
func (b *Builder) ConfigSpec() hcldec.ObjectSpec { return b.config.FlatMapstructure().HCL2Spec() }

// Prepare decodes and checks the configuration; every problem is reported at once.
func (b *Builder) Prepare(raws ...interface{}) (generatedVars []string, warnings []string, err error) {
	warnings, err = b.config.Prepare(raws...)
	if err != nil {
		return nil, warnings, err
	}
	return []string{"ImageName", "ManifestPath"}, warnings, nil
}

// Run builds the image and returns its artifact.
func (b *Builder) Run(ctx context.Context, ui packersdk.Ui, hook packersdk.Hook) (packersdk.Artifact, error) {
	state := new(multistep.BasicStateBag)
	state.Put("config", &b.config)
	state.Put("hook", hook)
	state.Put("ui", ui)

	steps := []multistep.Step{
		&commonsteps.StepOutputDir{Force: b.config.PackerForce, Path: b.config.OutputDir},
		&stepBuildImage{build: buildImage},
	}
	b.runner = commonsteps.NewRunner(steps, b.config.PackerConfig, ui)
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
