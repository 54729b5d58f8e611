package buildcmd

import (
	"bytes"
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
	"github.com/kpreload/kpreload/kmodcache/remote"
	"github.com/kpreload/kpreload/kmodcache/tiered"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// recipesDir is the repository's recipes/ from this package.
const recipesDir = "../../../../recipes"

// runBuild runs "kpreload build args..." and returns its exit status and output.
func runBuild(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := cli.Execute(append([]string{"build"}, args...), &out, &errb)
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

// TestBuildSaysUnsigned: a build that pulled cells without trusted keys
// says so of each on stderr, in its table and in --json.
func TestBuildSaysUnsigned(t *testing.T) {
	results := []matrix.Result{
		{Cell: matrix.Cell{Recipe: &recipe.Recipe{Name: "nvidia-550"}, Kernel: "6.1.0-56-cloud-amd64"}, State: matrix.StatePulled, Remote: tiered.RemotePulled, Trust: remote.TrustUnsigned},
		{Cell: matrix.Cell{Recipe: &recipe.Recipe{Name: "nvidia-535"}, Kernel: "6.1.0-56-cloud-amd64"}, State: matrix.StatePulled, Remote: tiered.RemotePulled, Trust: remote.TrustVerified},
	}
	var errb, table bytes.Buffer
	printUnsigned(&errb, results, stringer("oci://r/cells"))
	if got := errb.String(); !strings.Contains(got, "nvidia-550 for 6.1.0-56-cloud-amd64 pulled from oci://r/cells: unsigned") || strings.Contains(got, "nvidia-535") {
		t.Errorf("stderr %q, want the unsigned cell (and only it) named", got)
	}
	printBuildTable(&table, results)
	if !strings.Contains(table.String(), "pulled (unsigned)") {
		t.Errorf("the build table does not mark the unsigned cell:\n%s", table.String())
	}
	if js := buildJSON(results); js[0].Trust != "unsigned" || js[1].Trust != "verified" {
		t.Errorf("--json trust = %q, %q; want unsigned, verified", js[0].Trust, js[1].Trust)
	}
}

type stringer string

func (s stringer) String() string { return string(s) }
