package kpreloadbuilder

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"strings"

	"github.com/hashicorp/packer-plugin-sdk/common"
	"github.com/hashicorp/packer-plugin-sdk/multistep"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
)

// The builder runs its steps with Packer's -on-error and -debug itself
// rather than through the SDK's multistep/commonsteps package: that
// package's other steps (downloads through go-getter and its cloud storage
// clients) bring about 380 packages into the plugin that it never runs, and
// every cold build and `go vet` of the project compiles them. What Packer's
// own builders get from commonsteps.NewRunner and StepOutputDir, the
// builder gets from newRunner and stepOutputDir (docs/packer.md).

// newRunner returns the runner for steps, as cfg's -on-error and -debug ask:
// "cleanup" (the default) runs every step's cleanup after a failure or an
// interrupt; "abort" and "run-cleanup-provisioner" (the builder has no
// provisioner step) skip them, so a failed build keeps what its steps made;
// "ask" asks after a failed step whether to clean up, abort without cleanup
// or retry the step. -debug pauses after each step and before each cleanup
// until the user presses enter.
func newRunner(steps []multistep.Step, cfg common.PackerConfig, ui packersdk.Ui) multistep.Runner {
	wrapped := make([]multistep.Step, len(steps))
	for i, s := range steps {
		switch cfg.PackerOnError {
		case "abort", "run-cleanup-provisioner":
			wrapped[i] = &abortStep{step: s, ui: ui, mode: cfg.PackerOnError}
		case "ask":
			wrapped[i] = &askStep{step: s, ui: ui}
		default:
			wrapped[i] = s
		}
	}
	if cfg.PackerDebug {
		return &multistep.DebugRunner{Steps: wrapped, PauseFn: debugPause(ui)}
	}
	return &multistep.BasicRunner{Steps: wrapped}
}

// stepName is the name a step goes by in messages: a wrapper's inner step's,
// else its type's.
func stepName(s multistep.Step) string {
	if w, ok := s.(multistep.StepWrapper); ok {
		return w.InnerStepName()
	}
	return reflect.Indirect(reflect.ValueOf(s)).Type().Name()
}

// stopped reports whether the build was halted by a failed step or
// cancelled, and says which in words.
func stopped(state multistep.StateBag) (string, bool) {
	if _, ok := state.GetOk(multistep.StateCancelled); ok {
		return "interrupted", true
	}
	if _, ok := state.GetOk(multistep.StateHalted); ok {
		return "failed", true
	}
	return "", false
}

// abortStep is -on-error=abort: the step's cleanup is skipped when the build
// stopped, so what it made stays for the user to look at.
type abortStep struct {
	step multistep.Step
	ui   packersdk.Ui
	mode string // the -on-error value, for the message
}

// InnerStepName names the wrapped step.
func (s *abortStep) InnerStepName() string { return stepName(s.step) }

// Run runs the wrapped step.
func (s *abortStep) Run(ctx context.Context, state multistep.StateBag) multistep.StepAction {
	return s.step.Run(ctx, state)
}

// Cleanup runs the wrapped step's cleanup unless the build stopped.
func (s *abortStep) Cleanup(state multistep.StateBag) {
	if how, ok := stopped(state); ok {
		s.ui.Error(fmt.Sprintf("build %s, -on-error=%s: skipping the cleanup of step %q, what it made stays", how, s.mode, s.InnerStepName()))
		return
	}
	s.step.Cleanup(state)
}

// askStep is -on-error=ask: after a failed step the user chooses to clean
// up (the default), to abort without cleanup, or to retry the step.
type askStep struct {
	step    multistep.Step
	ui      packersdk.Ui
	aborted bool
}

// InnerStepName names the wrapped step.
func (s *askStep) InnerStepName() string { return stepName(s.step) }

// askQuestion is what askStep asks after a failed step.
const askQuestion = "[c] Clean up and exit, [a] abort without cleanup, or [r] retry step (build may fail even if retry succeeds)?"

// Run runs the wrapped step until it succeeds or the user stops retrying.
func (s *askStep) Run(ctx context.Context, state multistep.StateBag) multistep.StepAction {
	for {
		action := s.step.Run(ctx, state)
		if action != multistep.ActionHalt || ctx.Err() != nil {
			return action
		}
		if err, ok := state.GetOk("error"); ok {
			s.ui.Error(fmt.Sprint(err))
		}
		s.ui.Say(fmt.Sprintf("Step %q failed", s.InnerStepName()))
		switch s.ask() {
		case 'a':
			s.aborted = true
			return action
		case 'r':
			state.Remove("error")
			continue
		default:
			return action
		}
	}
}

// ask reads the user's answer: 'c', 'a' or 'r'; an empty answer, or no
// terminal to ask on, is 'c'.
func (s *askStep) ask() byte {
	for {
		line, err := s.ui.Ask(askQuestion)
		if err != nil {
			return 'c'
		}
		answer := strings.ToLower(strings.TrimSpace(line)) + "c"
		switch answer[0] {
		case 'c', 'a', 'r':
			return answer[0]
		}
		s.ui.Say(fmt.Sprintf("Incorrect input: %q", line))
	}
}

// Cleanup runs the wrapped step's cleanup unless the user chose abort.
func (s *askStep) Cleanup(state multistep.StateBag) {
	if s.aborted {
		s.ui.Error(fmt.Sprintf("aborted: skipping the cleanup of step %q, what it made stays", s.InnerStepName()))
		return
	}
	s.step.Cleanup(state)
}

// debugPause is -debug's pause: it waits for enter, or for the build to be
// cancelled.
func debugPause(ui packersdk.Ui) multistep.DebugPauseFn {
	return func(loc multistep.DebugLocation, name string, state multistep.StateBag) {
		where := "at"
		switch loc {
		case multistep.DebugLocationAfterRun:
			where = "after run of"
		case multistep.DebugLocationBeforeCleanup:
			where = "before cleanup of"
		}
		// Ui.Ask returns when Packer is interrupted too.
		_, _ = ui.Ask(fmt.Sprintf("Pausing %s step '%s'. Press enter to continue.", where, name))
	}
}

// stepOutputDir makes the output directory: an existing one is removed
// first with -force (Prepare refuses it otherwise); when the build fails or
// is interrupted, its cleanup removes the directory it made.
type stepOutputDir struct {
	force bool
	path  string
	made  bool
}

// Run makes the directory.
func (s *stepOutputDir) Run(_ context.Context, state multistep.StateBag) multistep.StepAction {
	ui := state.Get("ui").(packersdk.Ui)
	fail := func(err error) multistep.StepAction {
		state.Put("error", err)
		ui.Error(err.Error())
		return multistep.ActionHalt
	}
	if _, err := os.Lstat(s.path); err == nil {
		if !s.force {
			return fail(fmt.Errorf("output_directory %s already exists: remove it or run packer build with -force", s.path))
		}
		ui.Say(fmt.Sprintf("Deleting the previous output directory %s (-force)", s.path))
		if err := os.RemoveAll(s.path); err != nil {
			return fail(fmt.Errorf("output_directory: remove the previous one (-force): %w", err))
		}
	}
	if err := os.MkdirAll(s.path, 0o755); err != nil {
		return fail(fmt.Errorf("output_directory: %w", err))
	}
	s.made = true
	return multistep.ActionContinue
}

// Cleanup removes the directory it made when the build stopped.
func (s *stepOutputDir) Cleanup(state multistep.StateBag) {
	if _, ok := stopped(state); !ok || !s.made {
		return
	}
	ui := state.Get("ui").(packersdk.Ui)
	ui.Say(fmt.Sprintf("Deleting output directory %s", s.path))
	if err := os.RemoveAll(s.path); err != nil {
		ui.Error(fmt.Sprintf("output_directory %s: %v", s.path, err))
	}
}
