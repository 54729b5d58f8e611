package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cells"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/clirun"
	"github.com/kpreload/kpreload/testsupport/testenv"
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

func TestBuildBadRecipePath(t *testing.T) {
	for _, tt := range []struct{ arg, want string }{
		{"./no/such/recipe.yaml", "recipe ./no/such/recipe.yaml: no such file"},
		{"no-such-recipe", "no recipe of that name"},
		{"no-such-recipe:6.1.0-56-cloud-amd64", "no recipe of that name"},
		{":6.1.0-56-cloud-amd64", "want RECIPE or RECIPE:KVER"},
		{"testdriver:", "want RECIPE or RECIPE:KVER"},
	} {
		code, _, stderr := runBuild(t, "--recipes", recipesDir, "--cache", t.TempDir(), tt.arg)
		if code == 0 || !strings.Contains(stderr, tt.want) {
			t.Errorf("build %s = exit %d, stderr %q; want non-zero and %q", tt.arg, code, stderr, tt.want)
		}
	}
	// The "have:" list names the recipes that exist.
	_, _, stderr := runBuild(t, "--recipes", recipesDir, "--cache", t.TempDir(), "no-such-recipe")
	if !strings.Contains(stderr, "have: ") || !strings.Contains(stderr, "testdriver") {
		t.Errorf("stderr %q does not list the recipes there are", stderr)
	}
}

func TestBuildBadRecipeContent(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(file, []byte("name: bad\ndriver: {name: x, version: 1.0}\nflavour: open\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runBuild(t, "--cache", t.TempDir(), file)
	if code == 0 || !strings.Contains(stderr, file+":3") || !strings.Contains(stderr, "flavour") {
		t.Errorf("build %s = exit %d, stderr %q; want the file, line 3 and the unknown field", file, code, stderr)
	}
}

func TestBuildUnknownKernel(t *testing.T) {
	testenv.SkipShort(t, "reads the archive's bookworm package lists (an apt-get update on a fresh machine)")
	if _, err := exec.LookPath("apt-cache"); err != nil {
		t.Fatalf("apt-cache is missing: %v (Debian's apt; run scripts/deps.sh)", err)
	}
	for _, args := range [][]string{
		{"testdriver", "--kernel", "6.1.0-99-cloud-amd64"},
		{"testdriver:6.1.0-99-cloud-amd64"},
	} {
		code, stdout, stderr := runBuild(t, append([]string{"--recipes", recipesDir, "--cache", t.TempDir()}, args...)...)
		if code == 0 {
			t.Errorf("build %v = exit 0, want non-zero", args)
		}
		for _, want := range []string{"unknown kernel 6.1.0-99-cloud-amd64", "available", "unpacked: ", "6.1.0-56-cloud-amd64", "archive, cloud-amd64: "} {
			if !strings.Contains(stderr, want) {
				t.Errorf("build %v: stderr %q lacks %q", args, stderr, want)
			}
		}
		if stdout != "" {
			t.Errorf("build %v printed a result %q for a request it refused", args, stdout)
		}
	}
}

func TestLoadCells(t *testing.T) {
	const k1, k2 = "6.1.0-56-cloud-amd64", "6.12.117+deb12-cloud-amd64"
	tests := []struct {
		args    []string
		recipes []string
		kernels map[string][]string // recipe name -> its cells' kernels; absent: its matrix
	}{
		{[]string{"testdriver"}, []string{"testdriver"}, map[string][]string{}},
		{[]string{"testdriver:" + k1}, []string{"testdriver"}, map[string][]string{"testdriver": {k1}}},
		{[]string{"testdriver:" + k1, "nvidia-535-open:" + k2, "testdriver:" + k2, "testdriver:" + k1}, []string{"testdriver", "nvidia-535-open"},
			map[string][]string{"testdriver": {k1, k2}, "nvidia-535-open": {k2}}},
		{[]string{"testdriver:" + k1, "testdriver"}, []string{"testdriver"}, map[string][]string{}},
		{[]string{filepath.Join(recipesDir, "testdriver.yaml") + ":" + k2}, []string{"testdriver"}, map[string][]string{"testdriver": {k2}}},
	}
	for _, tt := range tests {
		rs, ks, err := cells.LoadCells(tt.args, recipesDir)
		if err != nil {
			t.Errorf("cells.LoadCells(%v): %v", tt.args, err)
			continue
		}
		var names []string
		got := map[string][]string{}
		for _, r := range rs {
			names = append(names, r.Name)
			if k, ok := ks[r]; ok {
				got[r.Name] = k
			}
		}
		if !reflect.DeepEqual(names, tt.recipes) || !reflect.DeepEqual(got, tt.kernels) {
			t.Errorf("cells.LoadCells(%v) = %v %v, want %v %v", tt.args, names, got, tt.recipes, tt.kernels)
		}
	}
}

func TestPrintBuildTable(t *testing.T) {
	td := &recipe.Recipe{Name: "testdriver", Driver: recipe.Driver{Name: "kpreload-edu", Version: "1.0.0"}, Flavor: "open"}
	open := &recipe.Recipe{Name: "nvidia-535-open", Driver: recipe.Driver{Name: "nvidia", Version: "535.261.03"}, Flavor: "open"}
	results := []matrix.Result{
		{Cell: matrix.Cell{Recipe: td, Kernel: "k1"}, State: matrix.StateOK, SetID: "aa", Duration: time.Second},
		{Cell: matrix.Cell{Recipe: td, Kernel: "k2"}, State: matrix.StateCached, SetID: "bb"},
		{Cell: matrix.Cell{Recipe: open, Kernel: "k2"}, State: matrix.StateFailed, FirstError: "nv-pci.c:1:2: error: too few arguments", LogPath: "/logs/x.log"},
	}
	var b bytes.Buffer
	printBuildTable(&b, results)
	want := `KERNEL     testdriver  nvidia-535-open
(version)  1.0.0       535.261.03
k1         ok          -
k2         cached      failed

FAILED nvidia-535-open for k2:
  nv-pci.c:1:2: error: too few arguments
  log: /logs/x.log

3 cells: 1 ok, 1 cached, 1 failed
`
	if got := b.String(); got != want {
		t.Errorf("printBuildTable =\n%s\nwant\n%s", got, want)
	}
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
