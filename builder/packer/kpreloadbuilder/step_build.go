package kpreloadbuilder

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/packer-plugin-sdk/multistep"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/kpreload/kpreload/builder/image"
)

// buildImage is image.Build; tests replace it.
var buildImage = image.Build

// stepBuildImage runs the image build, reporting its progress through the UI,
// and puts the manifest and the artifact into the state bag.
type stepBuildImage struct {
	build func(context.Context, image.Options) (*image.Manifest, error)
}

// Run builds the image.
func (s *stepBuildImage) Run(ctx context.Context, state multistep.StateBag) multistep.StepAction {
	c := state.Get("config").(*Config)
	ui := state.Get("ui").(packersdk.Ui)

	opts := c.Options()
	var mu sync.Mutex
	start := time.Now()
	opts.Progress = func(msg string) {
		mu.Lock()
		defer mu.Unlock()
		ui.Say(fmt.Sprintf("[%5.1fs] %s", time.Since(start).Seconds(), msg))
	}
	ui.Say(fmt.Sprintf("Building image %s (kernels %v, recipes %v) into %s", opts.Name, opts.Kernels, recipeNames(c), opts.OutDir))
	m, err := s.build(ctx, opts)
	if err != nil {
		err = fmt.Errorf("build image %s: %w", opts.Name, err)
		state.Put("error", err)
		ui.Error(err.Error())
		return multistep.ActionHalt
	}
	a := newArtifact(m, image.OutputPath(opts.OutDir, opts.Name, "manifest.json"))
	for _, f := range m.Files {
		ui.Say(fmt.Sprintf("Wrote %s (%s, %d MiB, sha256 %s)", f.Path, f.Format, f.Size>>20, f.SHA256))
	}
	ui.Say(fmt.Sprintf("Image %s built in %.1fs: %d driver set(s) for %d kernel(s)", m.Name, time.Since(start).Seconds(), len(m.Drivers), len(m.Kernels)))
	state.Put("manifest", m)
	state.Put("artifact", a)
	return multistep.ActionContinue
}

// Cleanup does nothing: image.Build removes its own work directory, and the
// output directory step removes a failed build's outputs.
func (s *stepBuildImage) Cleanup(multistep.StateBag) {}

// recipeNames lists the configured recipes' names.
func recipeNames(c *Config) []string {
	names := make([]string, 0, len(c.recipes))
	for _, r := range c.recipes {
		names = append(names, r.Name)
	}
	return names
}
