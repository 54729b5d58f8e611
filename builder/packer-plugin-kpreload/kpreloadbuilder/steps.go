package kpreloadbuilder

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/packer-plugin-sdk/multistep"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/kpreload/kpreload/builder/image"
)

// jobPhases returns the phases the builder runs as steps: the job's own, in
// its order; tests replace it.
var jobPhases = (*image.Job).Phases

// stepPhase runs one phase of the image build (image.Phase) as a multistep
// step: its Run on Packer's context, its Cleanup when the runner unwinds.
type stepPhase struct {
	phase image.Phase
}

// InnerStepName names the step after its phase (in -debug's pauses and
// -on-error's messages).
func (s *stepPhase) InnerStepName() string { return "phase " + s.phase.Name }

// Run runs the phase; a failure halts the build with the phase's error.
func (s *stepPhase) Run(ctx context.Context, state multistep.StateBag) multistep.StepAction {
	c := state.Get("config").(*Config)
	ui := state.Get("ui").(packersdk.Ui)
	ui.Say(fmt.Sprintf("%s: %s", s.phase.Name, s.phase.Title))
	if err := s.phase.Run(ctx); err != nil {
		err = fmt.Errorf("build image %s: %s: %w", c.Name, s.phase.Name, err)
		state.Put("error", err)
		ui.Error(err.Error())
		return multistep.ActionHalt
	}
	return multistep.ActionContinue
}

// Cleanup removes what the phase made that the image does not keep and, when
// the build was halted or cancelled, the outputs it put into place.
func (s *stepPhase) Cleanup(state multistep.StateBag) {
	_, cancelled := state.GetOk(multistep.StateCancelled)
	_, halted := state.GetOk(multistep.StateHalted)
	s.phase.Cleanup(cancelled || halted)
}

// stepArtifact puts the built image's manifest and artifact into the state bag.
type stepArtifact struct{}

// Run makes the artifact from the job's manifest.
func (s *stepArtifact) Run(_ context.Context, state multistep.StateBag) multistep.StepAction {
	j := state.Get("job").(*image.Job)
	ui := state.Get("ui").(packersdk.Ui)
	start := state.Get("start").(time.Time)
	m := j.Manifest()
	if m == nil {
		err := fmt.Errorf("build image %s: the build's phases ended without a manifest", j.Options().Name)
		state.Put("error", err)
		ui.Error(err.Error())
		return multistep.ActionHalt
	}
	o := j.Options()
	a := newArtifact(m, image.OutputPath(o.OutDir, o.Name, "manifest.json"))
	for _, f := range m.Files {
		ui.Say(fmt.Sprintf("Wrote %s (%s, %d MiB, sha256 %s)", f.Path, f.Format, f.Size>>20, f.SHA256))
	}
	ui.Say(fmt.Sprintf("Image %s built in %.1fs: %d driver set(s) for %d kernel(s)", m.Name, time.Since(start).Seconds(), len(m.Drivers), len(m.Kernels)))
	state.Put("manifest", m)
	state.Put("artifact", a)
	return multistep.ActionContinue
}

// Cleanup does nothing: the artifact's files belong to the phases' steps.
func (s *stepArtifact) Cleanup(multistep.StateBag) {}

// recipeNames lists the configured recipes' names.
func recipeNames(c *Config) []string {
	names := make([]string, 0, len(c.LoadedRecipes()))
	for _, r := range c.LoadedRecipes() {
		names = append(names, r.Name)
	}
	return names
}
