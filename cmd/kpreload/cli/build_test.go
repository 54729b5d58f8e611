package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/clirun"
)

// recipesDir is the repository's recipes/ from this package.
const recipesDir = "../../../recipes"

// runBuild runs "kpreload build args..." and returns its exit status and output.
func runBuild(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Execute(append([]string{"build"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// TestBuildJSONAndExitStatus builds the test driver and a copy with a syntax
// error for one kernel with the real dkms: the exit status is 3
// (clirun.ExitCellsFailed: only cells failed to compile), --json
// prints one object per cell with the documented fields, the good cell is
// ok with a set id and key, the bad one failed with gcc's first error and
// its log.
func TestBuildJSONAndExitStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("real dkms builds: skipped with -short")
	}
	const kver = "6.1.0-56-cloud-amd64"
	dir := keptDir(t)
	src := filepath.Join(dir, "testdriver")
	if out, err := exec.Command("cp", "-rL", filepath.Join(recipesDir, "testdriver"), src).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	c := filepath.Join(src, "kpreload_edu.c")
	code, err := os.ReadFile(c)
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(string(code), "edu->id = ioread32(edu->bar0 + EDU_REG_ID);", "edu->id = ioread32(edu->bar0 + EDU_REG_ID)", 1)
	if broken == string(code) {
		t.Fatal("kpreload_edu.c changed: the line this test breaks is gone")
	}
	if err := os.WriteFile(c, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	yml, err := os.ReadFile(filepath.Join(recipesDir, "testdriver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	brokenRecipe := filepath.Join(dir, "broken.yaml")
	if err := os.WriteFile(brokenRecipe, []byte(strings.Replace(string(yml), "name: testdriver\n", "name: testdriver-broken\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}

	status, stdout, stderr := runBuild(t, "--recipes", recipesDir, "--cache", filepath.Join(dir, "cache"), "--json",
		"testdriver:"+kver, brokenRecipe+":"+kver)
	if status != clirun.ExitCellsFailed {
		t.Errorf("exit status %d, want %d (one cell failed); stderr:\n%s", status, clirun.ExitCellsFailed, stderr)
	}
	if !strings.Contains(stderr, "1 of 2 cells failed (testdriver-broken/"+kver+")") {
		t.Errorf("stderr %q does not name the failed cell", stderr)
	}
	var got []map[string]any
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("--json output is not a JSON array: %v\n%s", err, stdout)
	}
	if len(got) != 2 {
		t.Fatalf("--json has %d cells, want 2:\n%s", len(got), stdout)
	}
	for _, c := range got {
		for _, f := range []string{"recipe", "driver", "version", "flavor", "kernel", "state", "seconds"} {
			if _, ok := c[f]; !ok {
				t.Errorf("cell %v lacks field %q", c["recipe"], f)
			}
		}
		if c["kernel"] != kver {
			t.Errorf("cell %v kernel = %v, want %s", c["recipe"], c["kernel"], kver)
		}
	}
	ok, bad := got[0], got[1]
	if ok["recipe"] != "testdriver" || ok["state"] != "ok" || len(ok["set_id"].(string)) != 64 {
		t.Errorf("good cell = %v, want testdriver ok with a set id", ok)
	}
	if key, _ := ok["key"].(map[string]any); key["schema"] != matrix.KeySchema || key["kernel"] != kver {
		t.Errorf("good cell key = %v, want schema %s kernel %s", key, matrix.KeySchema, kver)
	}
	first, _ := bad["first_error"].(string)
	if bad["recipe"] != "testdriver-broken" || bad["state"] != "failed" || !strings.Contains(first, "kpreload_edu.c:") || !strings.Contains(first, "error: expected ';'") {
		t.Errorf("broken cell = %v, want failed with gcc's missing ';' error", bad)
	}
	if log, _ := bad["log"].(string); log == "" {
		t.Errorf("broken cell has no log path")
	} else if b, err := os.ReadFile(log); err != nil || !strings.Contains(string(b), first) {
		t.Errorf("log %s (%v) lacks the first error", log, err)
	}
	if !t.Failed() {
		keep(dir) // the good cell, for TestFollowHelpExamples
	}
}
