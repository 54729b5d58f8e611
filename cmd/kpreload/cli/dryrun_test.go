package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cells"
	"github.com/kpreload/kpreload/kmodcache/remote"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestImageBuildDryRunInProcess: image build --dry-run checks the options
// and the recipes and prints what it would write and its phases, in this
// process (the examples' test runs the built binary).
func TestImageBuildDryRunInProcess(t *testing.T) {
	recipes := filepath.Join(testenv.RepoRoot(t), "recipes")
	out := t.TempDir()
	common := []string{"image", "build", "--name", "ci", "--kernel", "6.1.0-56-cloud-amd64", "--recipe", "testdriver", "--recipes", recipes,
		"--kpreload-binary", os.Args[0], "--init", os.Args[0], "--out", out, "--cache", t.TempDir(), "--dry-run"}
	text, _ := mustRun(t, 0, common...)
	wantIn(t, "image build --dry-run", text, "image ci: Debian ", "recipes testdriver", "would write "+filepath.Join(out, "ci.raw"), "dry run: nothing built")
	js, _ := mustRun(t, 0, append(common, "--json", "--format", "vmdk")...)
	var p imagePlan
	if err := json.Unmarshal([]byte(js), &p); err != nil || p.Name != "ci" || len(p.Outputs) != 2 || len(p.Phases) == 0 {
		t.Errorf("image build --dry-run --json = %q (%v), want the plan of ci: a vmdk and the manifest, its phases", js, err)
	}
	_, errOut := mustRun(t, 1, append(common, "--instance", filepath.Join(out, "absent.yaml"))...)
	wantIn(t, "image build --dry-run --instance absent", errOut, "instance file", "absent.yaml")
	bad := filepath.Join(out, "bad.yaml")
	if err := os.WriteFile(bad, []byte("resources:\n  driver:\n    flavour: open\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut = mustRun(t, 1, append(common, "--instance", bad)...)
	wantIn(t, "image build --dry-run --instance bad.yaml", errOut, "--instance: ", "bad.yaml")
	_, errOut = mustRun(t, 1, "image", "build", "--name", "ci", "--kernel", "6.1.0-56-cloud-amd64", "--add", "nodest", "--dry-run")
	wantIn(t, "image build --add nodest", errOut, `--add "nodest": want DEST=SRC`)
	_, errOut = mustRun(t, 1, "image", "build", "--kernel", "6.1.0-56-cloud-amd64", "--dry-run")
	wantIn(t, "image build without --name", errOut, "--name is required")
	_, errOut = mustRun(t, 1, "image", "build", "--name", "ci", "--dry-run")
	wantIn(t, "image build without --kernel", errOut, "--kernel is required")
	_, errOut = mustRun(t, 1, "image", "build", "--name", "ci", "--kernel", "k", "--bootloader", "lilo", "--dry-run")
	wantIn(t, "image build --bootloader lilo", errOut, "lilo")
}

// TestBootDryRunInProcess: boot --dry-run prints the QEMU command line of
// a direct boot and of an image's, as text and JSON, starting nothing.
func TestBootDryRunInProcess(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"vmlinuz", "initrd.img", "root.img", "d.qcow2"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := func(f string) string { return filepath.Join(dir, f) }
	out, _ := mustRun(t, 0, "boot", "--kernel", p("vmlinuz"), "--initramfs", p("initrd.img"), "--root-disk", p("root.img"), "--device", "edu",
		"--append", "quiet loglevel=3", "--work-dir", p("logs"), "--dry-run")
	wantIn(t, "boot --dry-run", out, "-kernel "+p("vmlinuz"), "-device edu", "'console=ttyS0")
	out, _ = mustRun(t, 0, "boot", "--image", p("d.qcow2"), "--work-dir", p("logs"), "--firmware", "bios", "--dry-run", "--json")
	var cmd struct {
		Command []string `json:"command"`
	}
	if err := json.Unmarshal([]byte(out), &cmd); err != nil || len(cmd.Command) < 2 || !strings.Contains(strings.Join(cmd.Command, " "), "d.qcow2") {
		t.Errorf("boot --image --dry-run --json = %q, %v; want the command booting d.qcow2", out, err)
	}
	_, errOut := mustRun(t, 1, "boot", "--kernel", p("absent"), "--dry-run")
	wantIn(t, "boot --kernel absent --dry-run", errOut, "absent")
}

// TestBuildProgressLines: the lines build prints off a terminal as cells
// change state.
func TestBuildProgressLines(t *testing.T) {
	var b bytes.Buffer
	p := cells.NewProgress(&b)
	r := &recipe.Recipe{Name: "testdriver"}
	start := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	cell := matrix.Cell{Recipe: r, Kernel: "6.1.0-56-cloud-amd64"}
	p.Event(matrix.Event{Cell: cell, Index: 0, State: matrix.StateBuilding, Time: start})
	p.Event(matrix.Event{Cell: cell, Index: 0, State: matrix.StateOK, Time: start.Add(3 * time.Second),
		Result: &matrix.Result{State: matrix.StateOK, Duration: 3 * time.Second, Remote: "pushed"}})
	other := matrix.Cell{Recipe: r, Kernel: "6.12.0-1-cloud-amd64"}
	p.Event(matrix.Event{Cell: other, Index: 1, State: matrix.StateFailed, Time: start,
		Result: &matrix.Result{State: matrix.StateFailed, FirstError: "error: x.c:1", Remote: "push failed", PushErr: errors.New("denied")}})
	p.Stop()
	wantIn(t, "build progress", b.String(), "building (0s)", "ok (3s) [pushed]", "failed: error: x.c:1 [push failed]: denied")
}

// TestPullSummary: a pull that refused cells says how many were pulled
// and names each refusal; one that refused none is no error.
func TestPullSummary(t *testing.T) {
	rm, err := remote.Open("oci://127.0.0.1:1/kpreload/cells", remote.Options{PlainHTTP: true, DockerConfig: filepath.Join(t.TempDir(), "config.json")})
	if err != nil {
		t.Fatal(err)
	}
	if err := pullSummary(rm, 3, nil); err != nil {
		t.Errorf("pullSummary(none refused) = %v, want nil", err)
	}
	err = pullSummary(rm, 1, []error{errors.New("cell a: digest"), errors.New("cell b: rollback")})
	if err == nil || !strings.Contains(err.Error(), "1 cell(s) pulled, 2 refused:\n  cell a: digest\n  cell b: rollback") {
		t.Errorf("pullSummary(2 refused) = %v", err)
	}
}
