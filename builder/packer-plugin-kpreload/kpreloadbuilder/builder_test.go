package kpreloadbuilder

import (
	"context"
	"errors"
	"github.com/kpreload/kpreload/testsupport/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/kpreload/kpreload/builder/image"
)

// TestRunCleanup stops a build after the real prepare step, once by
// cancelling Packer's context between steps and once by a failing step, and
// checks that no later step ran, that the steps' cleanups removed what they
// made (the work directory, the temporary output directory, the output
// directory) and that files that were there before stay.
func TestRunCleanup(t *testing.T) {
	testenv.SkipShort(t, "reads the archive's bookworm package lists (an apt-get update on a fresh machine)")
	for _, tool := range []string{"mmdebstrap", "sfdisk", "mkfs.vfat", "mmd", "mcopy", "mkfs.ext4", "qemu-img", "dpkg-deb", "systemctl", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is missing (scripts/deps.sh installs the image tools)", tool)
		}
	}
	fakeKernels(t, "6.1.0-56-cloud-amd64")
	for _, tt := range []struct {
		name    string
		fail    bool
		wantErr string
	}{
		{"cancelled between steps", false, "build was cancelled"},
		{"a step fails", true, "build image ci: drivers: dkms failed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			raw := baseRaw(t)
			raw["recipes"] = []string{}
			raw["bootloader"] = "grub"
			tmp := t.TempDir()
			raw["temp_dir"] = tmp
			out := raw["output_directory"].(string)
			keep := []string{filepath.Join(tmp, "user-file"), raw["kpreload_binary"].(string), raw["init_binary"].(string)}
			if err := os.WriteFile(keep[0], []byte("#!/bin/false\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			var b Builder
			if _, _, err := b.Prepare(raw); err != nil {
				t.Fatalf("Prepare: %v", err)
			}

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			made := filepath.Join(tmp, "made-by-drivers")
			var ran, cleaned []string
			var failed bool
			old := jobPhases
			t.Cleanup(func() { jobPhases = old })
			jobPhases = func(j *image.Job) []image.Phase {
				real := j.Phases()
				if real[0].Name != image.PhasePrepare {
					t.Fatalf("first phase %s, want %s", real[0].Name, image.PhasePrepare)
				}
				prepare := real[0]
				cleanup := prepare.Cleanup
				prepare.Cleanup = func(f bool) { cleaned = append(cleaned, image.PhasePrepare); cleanup(f) }
				return []image.Phase{
					prepare,
					{Name: image.PhaseDrivers, Title: "a stand-in", Run: func(context.Context) error {
						ran = append(ran, image.PhaseDrivers)
						// prepare's directories are there now.
						if ents, _ := os.ReadDir(tmp); len(ents) != 2 {
							t.Errorf("%s holds %d entries after prepare, want the user's file and the work directory", tmp, len(ents))
						}
						if ents, _ := os.ReadDir(out); len(ents) != 1 || !strings.HasPrefix(ents[0].Name(), ".tmp-ci-") {
							t.Errorf("%s holds %v after prepare, want the temporary output directory", out, ents)
						}
						if err := os.WriteFile(made, nil, 0o644); err != nil {
							return err
						}
						if tt.fail {
							return errors.New("dkms failed")
						}
						cancel()
						return nil
					}, Cleanup: func(f bool) {
						cleaned = append(cleaned, image.PhaseDrivers)
						failed = f
						os.Remove(made)
					}},
					{Name: image.PhaseRootfs, Title: "never runs", Run: func(context.Context) error {
						ran = append(ran, image.PhaseRootfs)
						return nil
					}, Cleanup: func(bool) { cleaned = append(cleaned, image.PhaseRootfs) }},
				}
			}

			a, err := b.Run(ctx, packersdk.TestUi(t), &packersdk.MockHook{})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Run error = %v, want one containing %q", err, tt.wantErr)
			}
			if a != nil {
				t.Errorf("Run returned an artifact: %v", a)
			}
			if got, want := strings.Join(ran, " "), "drivers"; got != want {
				t.Errorf("phases run: %q, want %q", got, want)
			}
			if got, want := strings.Join(cleaned, " "), "drivers prepare"; got != want {
				t.Errorf("phases cleaned up: %q, want %q", got, want)
			}
			if !failed {
				t.Errorf("the drivers step cleaned up with failed = false, want true")
			}
			if ents, _ := os.ReadDir(tmp); len(ents) != 1 || ents[0].Name() != "user-file" {
				t.Errorf("%s after cleanup holds %v, want only the user's file", tmp, ents)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("output directory %s is still there after the build stopped (%v)", out, err)
			}
			for _, p := range keep {
				if _, err := os.Stat(p); err != nil {
					t.Errorf("%s was there before the build: %v", p, err)
				}
			}
		})
	}
}

// TestBuildStepsArePhases checks that the builder's steps map one to one onto
// the image build's phases, in their order, between the output directory's
// step and the artifact's.
func TestBuildStepsArePhases(t *testing.T) {
	job := image.NewJob(image.Options{})
	steps := buildSteps(&Config{}, job)
	phases := job.Phases()
	if got, want := len(steps), len(phases)+2; got != want {
		t.Fatalf("%d steps, want %d: the output directory, %d phases, the artifact", got, want, len(phases))
	}
	if _, ok := steps[0].(*stepOutputDir); !ok {
		t.Errorf("first step %T, want the output directory's", steps[0])
	}
	for i, p := range phases {
		s, ok := steps[i+1].(*stepPhase)
		if !ok || s.phase.Name != p.Name {
			t.Errorf("step %d is %T, want phase %s", i+1, steps[i+1], p.Name)
		}
	}
	if _, ok := steps[len(steps)-1].(*stepArtifact); !ok {
		t.Errorf("last step %T, want the artifact's", steps[len(steps)-1])
	}
}
