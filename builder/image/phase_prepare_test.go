package image

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/image/bootloader"
	"github.com/kpreload/kpreload/builder/image/stage"
	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestJobCancelledAfterPrepare runs the real prepare and drivers phases (no
// recipes: nothing to build) and cancels the build before the root
// filesystem: the work and temporary output directories go, an output
// directory prepare made goes, and files that were there before stay.
func TestJobCancelledAfterPrepare(t *testing.T) {
	testenv.SkipShort(t, "reads the archive's bookworm package lists (an apt-get update on a fresh machine)")
	for _, tool := range []string{"mmdebstrap", "sfdisk", "mkfs.vfat", "mmd", "mcopy", "mkfs.ext4", "qemu-img", "dpkg-deb", "systemctl", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is missing (scripts/deps.sh installs the image tools)", tool)
		}
	}
	for _, tt := range []struct {
		name      string
		outExists bool
	}{
		{"new output directory", false},
		{"existing output directory", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			bins := filepath.Join(dir, "bin")
			tmp := filepath.Join(dir, "tmp")
			out := filepath.Join(dir, "out", "images")
			for _, d := range []string{bins, tmp} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			keep := []string{filepath.Join(tmp, "user-file"), filepath.Join(bins, "kpreload"), filepath.Join(bins, "kpreload-init")}
			if tt.outExists {
				if err := os.MkdirAll(out, 0o755); err != nil {
					t.Fatal(err)
				}
				keep = append(keep, filepath.Join(out, "ci.qcow2")) // an earlier build's output
			}
			for _, p := range keep {
				if err := os.WriteFile(p, []byte("before\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			j := NewJob(Options{
				Name: "ci", OutDir: out, TempDir: tmp, Kernels: []string{testKernel}, Boot: bootloader.Options{Loader: install.GRUB},
				Stage: stage.Options{KpreloadBinary: keep[1], InitBinary: keep[2], CacheDir: filepath.Join(dir, "cache")},
			})
			var phases []Phase
			for _, p := range j.Phases() {
				phases = append(phases, p)
				if p.Name == PhaseDrivers {
					run := p.Run
					phases[len(phases)-1].Run = func(ctx context.Context) error {
						err := run(ctx)
						// prepare made its directories by now.
						if ents, _ := os.ReadDir(tmp); len(ents) != 2 {
							t.Errorf("%s holds %d entries after prepare, want the user's file and the work directory", tmp, len(ents))
						}
						cancel()
						return err
					}
				}
			}
			err := RunPhases(ctx, phases)
			if err == nil || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "before rootfs") {
				t.Fatalf("RunPhases error = %v, want cancelled before rootfs", err)
			}
			if j.Manifest() != nil {
				t.Errorf("a cancelled job has a manifest")
			}
			for _, p := range keep {
				if b, err := os.ReadFile(p); err != nil || string(b) != "before\n" {
					t.Errorf("%s was there before the build and is gone or changed: %v", p, err)
				}
			}
			if ents, _ := os.ReadDir(tmp); len(ents) != 1 {
				t.Errorf("%s holds %d entries after cleanup, want only the user's file", tmp, len(ents))
			}
			ents, err := os.ReadDir(out)
			switch {
			case tt.outExists && (err != nil || len(ents) != 1):
				t.Errorf("output directory after cleanup: %d entries (%v), want only the earlier output", len(ents), err)
			case !tt.outExists && !os.IsNotExist(err):
				t.Errorf("the output directory prepare made is still there (%v)", err)
			}
			if !tt.outExists {
				if _, err := os.Stat(filepath.Dir(out)); !os.IsNotExist(err) {
					t.Errorf("the output directory's parent prepare made is still there (%v)", err)
				}
			}
		})
	}
}

// TestPreparePhase runs the prepare phase: the output directory, the work
// directory in TempDir and the temporary output directory in OutDir are
// made, the manifest has its identifiers and the kernel command line names
// the root; a missing tool fails it before anything is made.
func TestPreparePhase(t *testing.T) {
	f := &fakeRunner{}
	j, o := fakeJob(t, f, nil)
	if err := runThrough(t, j, PhasePrepare); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{j.work, j.outTmp} {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			t.Errorf("directory %q: %v", d, err)
		}
	}
	if filepath.Dir(j.work) != o.TempDir || filepath.Dir(j.outTmp) != o.OutDir {
		t.Errorf("work %s, temporary output %s: want them in %s and %s", j.work, j.outTmp, o.TempDir, o.OutDir)
	}
	if j.m.RootUUID == "" || j.m.DiskGUID == "" || j.m.ESPUUID == "" || !strings.Contains(j.m.Cmdline, j.m.RootUUID) {
		t.Errorf("manifest %+v: want its identifiers and a command line naming the root", j.m)
	}

	f2 := &fakeRunner{missing: []string{"qemu-img"}}
	j2, o2 := fakeJob(t, f2, nil)
	if err := runThrough(t, j2, PhasePrepare); err == nil || !strings.Contains(err.Error(), "qemu-img is missing") {
		t.Errorf("prepare without qemu-img = %v, want it missing", err)
	}
	if ents := dirEntries(t, o2.TempDir); len(ents) != 0 {
		t.Errorf("a failed prepare made %q", ents)
	}
}
