package scripts_test

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kpreload/kpreload/builder/matrix"
)

// bundleFiles returns every file under dir by its path inside dir.
func bundleFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "README.md" {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		files[rel] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// planBundle runs scripts/plan-bundle.sh CACHE KERNEL into a new directory
// and returns its files.
func planBundle(t *testing.T, cache string) map[string][]byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "bundle")
	if b, err := exec.Command("./plan-bundle.sh", cache, "6.1.0-56-cloud-amd64", out).CombinedOutput(); err != nil {
		t.Fatalf("plan-bundle.sh %s: %v\n%s", cache, err, b)
	}
	return bundleFiles(t, out)
}

func sameFiles(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// TestPlanBundle: testdata/plan-bundle is what scripts/plan-bundle.sh makes:
// the script run on the bundle (a cache without modules) gives it back file
// for file, and, where the end-to-end tests' store under the download cache
// holds the same real cells, run on that store it gives the same files.
func TestPlanBundle(t *testing.T) {
	if _, err := exec.LookPath("jq"); err != nil {
		t.Fatal("plan-bundle.sh needs jq: scripts/deps.sh installs it")
	}
	committed := bundleFiles(t, "../testdata/plan-bundle")
	if len(committed) != 3 {
		t.Errorf("testdata/plan-bundle holds %d files, want the index and two supported-gpus.json", len(committed))
	}
	if got := planBundle(t, "../testdata/plan-bundle"); !sameFiles(got, committed) {
		t.Errorf("plan-bundle.sh on testdata/plan-bundle made %d files that differ from it", len(got))
	}
	store := filepath.Join(matrix.DefaultDownloadDir, "store")
	if d := os.Getenv("KPRELOAD_CACHE"); d != "" {
		store = filepath.Join(d, "store")
	}
	ids := func(idx []byte) []string {
		var x struct {
			Sets []struct {
				ID string `json:"id"`
			} `json:"sets"`
		}
		json.Unmarshal(idx, &x)
		var out []string
		for _, s := range x.Sets {
			out = append(out, s.ID)
		}
		slices.Sort(out)
		return out
	}
	idx, err := os.ReadFile(filepath.Join(store, "index", "6.1.0-56-cloud-amd64.json"))
	if err != nil {
		t.Skipf("no store of real cells to compare with (%v): builder/e2e builds it", err)
	}
	if want := ids(committed[filepath.Join("index", "6.1.0-56-cloud-amd64.json")]); !slices.Equal(ids(idx), want) {
		t.Skipf("the store %s holds sets %q, the bundle %q: rebuilt cells; remake the bundle with scripts/plan-bundle.sh %s 6.1.0-56-cloud-amd64 testdata/plan-bundle", store, ids(idx), want, store)
	}
	if got := planBundle(t, store); !sameFiles(got, committed) {
		t.Errorf("plan-bundle.sh on %s made files that differ from testdata/plan-bundle", store)
	}
}
