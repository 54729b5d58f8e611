package kpreloadbuilder

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/packer-plugin-sdk/common"
	"github.com/hashicorp/packer-plugin-sdk/multistep"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
)

// scriptUi answers Ask from a script of lines and records everything shown.
type scriptUi struct {
	packersdk.MockUi
	answers []string
	asked   []string
	shown   []string
}

func (u *scriptUi) Ask(q string) (string, error) {
	u.asked = append(u.asked, q)
	if len(u.answers) == 0 {
		return "", errors.New("no available tty")
	}
	a := u.answers[0]
	u.answers = u.answers[1:]
	return a, nil
}
func (u *scriptUi) Say(m string)   { u.shown = append(u.shown, m) }
func (u *scriptUi) Error(m string) { u.shown = append(u.shown, "error: "+m) }

// fakeStep records its runs and cleanups in log; it fails its first fails runs.
type fakeStep struct {
	name  string
	fails int
	runs  int
	log   *[]string
}

func (s *fakeStep) InnerStepName() string { return s.name }
func (s *fakeStep) Run(_ context.Context, state multistep.StateBag) multistep.StepAction {
	s.runs++
	*s.log = append(*s.log, "run "+s.name)
	if s.runs <= s.fails {
		state.Put("error", fmt.Errorf("%s failed", s.name))
		return multistep.ActionHalt
	}
	return multistep.ActionContinue
}
func (s *fakeStep) Cleanup(multistep.StateBag) { *s.log = append(*s.log, "cleanup "+s.name) }

// TestNewRunner runs three steps, the second failing once, under each
// -on-error and -debug: which steps run, which cleanups run, what the user
// is asked and whether the build ends in an error.
func TestNewRunner(t *testing.T) {
	for _, tt := range []struct {
		name    string
		onError string
		debug   bool
		answers []string
		want    []string
		wantErr bool
		asks    int
		says    string
	}{
		{"default cleans up", "", false, nil,
			[]string{"run a", "run b", "cleanup b", "cleanup a"}, true, 0, ""},
		{"cleanup", "cleanup", false, nil,
			[]string{"run a", "run b", "cleanup b", "cleanup a"}, true, 0, ""},
		{"abort keeps what the steps made", "abort", false, nil,
			[]string{"run a", "run b"}, true, 0, `-on-error=abort: skipping the cleanup of step "a"`},
		{"run-cleanup-provisioner is abort here", "run-cleanup-provisioner", false, nil,
			[]string{"run a", "run b"}, true, 0, `-on-error=run-cleanup-provisioner: skipping the cleanup of step "b"`},
		{"ask, clean up", "ask", false, []string{"c"},
			[]string{"run a", "run b", "cleanup b", "cleanup a"}, true, 1, `Step "b" failed`},
		{"ask, no terminal: clean up", "ask", false, nil,
			[]string{"run a", "run b", "cleanup b", "cleanup a"}, true, 1, `Step "b" failed`},
		{"ask, abort", "ask", false, []string{"a"},
			[]string{"run a", "run b", "cleanup a"}, true, 1, `aborted: skipping the cleanup of step "b"`},
		{"ask, a wrong answer, then retry", "ask", false, []string{"x", "r"},
			[]string{"run a", "run b", "run b", "run c", "cleanup c", "cleanup b", "cleanup a"}, false, 2, `Incorrect input: "x"`},
		// Packer's DebugRunner pauses after each step that succeeded and
		// before its cleanup; the failed step b gets neither.
		{"debug pauses after a step and before its cleanup", "", true, []string{"", ""},
			[]string{"run a", "run b", "cleanup b", "cleanup a"}, true, 2, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var log []string
			steps := []multistep.Step{
				&fakeStep{name: "a", log: &log},
				&fakeStep{name: "b", fails: 1, log: &log},
				&fakeStep{name: "c", log: &log},
			}
			ui := &scriptUi{answers: tt.answers}
			state := new(multistep.BasicStateBag)
			state.Put("ui", ui)
			newRunner(steps, common.PackerConfig{PackerOnError: tt.onError, PackerDebug: tt.debug}, ui).Run(context.Background(), state)
			if got := log; !slices.Equal(got, tt.want) {
				t.Errorf("steps = %q, want %q", got, tt.want)
			}
			_, gotErr := state.GetOk("error")
			if gotErr != tt.wantErr {
				t.Errorf("error in the state: %v, want %v", gotErr, tt.wantErr)
			}
			if got := len(ui.asked); got != tt.asks {
				t.Errorf("asked %d times (%q), want %d", got, ui.asked, tt.asks)
			}
			if tt.says != "" && !strings.Contains(strings.Join(ui.shown, "\n"), tt.says) {
				t.Errorf("shown %q, want a line with %q", ui.shown, tt.says)
			}
			if want := []string{"Pausing after run of step 'a'. Press enter to continue.", "Pausing before cleanup of step 'a'. Press enter to continue."}; tt.debug && !slices.Equal(ui.asked, want) {
				t.Errorf("debug asked %q, want %q", ui.asked, want)
			}
		})
	}
}

// TestStepOutputDir checks the output directory's step: made when absent,
// refused when present without -force, replaced with it, removed when the
// build stops and kept when it succeeds.
func TestStepOutputDir(t *testing.T) {
	for _, tt := range []struct {
		name     string
		existing bool
		force    bool
		stop     string // "", multistep.StateHalted or multistep.StateCancelled
		wantRun  multistep.StepAction
		wantDir  bool
		wantOld  bool
	}{
		{"made", false, false, "", multistep.ActionContinue, true, false},
		{"existing refused", true, false, "", multistep.ActionHalt, true, true},
		{"existing replaced with -force", true, true, "", multistep.ActionContinue, true, false},
		{"removed when a later step fails", false, false, multistep.StateHalted, multistep.ActionContinue, false, false},
		{"removed when interrupted", true, true, multistep.StateCancelled, multistep.ActionContinue, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "out")
			old := filepath.Join(dir, "old-image.raw")
			if tt.existing {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(old, []byte("old"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ui := &scriptUi{}
			state := new(multistep.BasicStateBag)
			state.Put("ui", ui)
			s := &stepOutputDir{force: tt.force, path: dir}
			if got := s.Run(context.Background(), state); got != tt.wantRun {
				t.Fatalf("Run = %v, want %v (shown %q)", got, tt.wantRun, ui.shown)
			}
			if tt.wantRun == multistep.ActionHalt {
				if err, _ := state.GetOk("error"); err == nil || !strings.Contains(fmt.Sprint(err), "already exists: remove it or run packer build with -force") {
					t.Errorf("error %v, want the -force advice", err)
				}
				state.Put(multistep.StateHalted, true)
			}
			if tt.stop != "" {
				state.Put(tt.stop, true)
			}
			s.Cleanup(state)
			_, err := os.Stat(dir)
			if got := err == nil; got != tt.wantDir {
				t.Errorf("output directory there: %v, want %v", got, tt.wantDir)
			}
			_, err = os.Stat(old)
			if got := err == nil; got != tt.wantOld {
				t.Errorf("the earlier output there: %v, want %v", got, tt.wantOld)
			}
		})
	}
}
