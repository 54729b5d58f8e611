package follow

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestCycleArchiveFaults follows a recipe whose driver comes from a real
// signed apt archive on loopback (reprepro, gpg, the real apt): a Release
// file signed by another key, or past its Valid-Until, stops the cycle
// before anything is built or pushed; a package whose checksum does not
// match fails its cell, pushing nothing; once the archive is mended the
// next cycle builds and pushes the cell.
func TestCycleArchiveFaults(t *testing.T) {
	repo := testenv.StartAptArchive(t, "stable")
	repo.PublishFiles("stable", "follow-kernel-dkms", "555.1.2-1", map[string]string{
		"usr/src/follow-555.1.2/dkms.conf": "PACKAGE_NAME=\"follow\"\nPACKAGE_VERSION=\"555.1.2\"\nBUILT_MODULE_NAME[0]=\"dummy\"\n",
	})
	reg := testenv.StartRegistry(t)
	dir := t.TempDir()
	// The keys beside the recipe (a key outside the recipes directory is refused).
	repo.NewKey(filepath.Join(dir, "wrong.asc"))
	key, err := os.ReadFile(repo.Key)
	if err != nil {
		t.Fatal(err)
	}
	right := "right" + filepath.Ext(repo.Key)
	if err := os.WriteFile(filepath.Join(dir, right), key, 0o644); err != nil {
		t.Fatal(err)
	}
	writeRecipe := func(key string) *recipe.Recipe {
		t.Helper()
		text := fmt.Sprintf(`name: follow-555
driver:
  name: follow
flavor: proprietary
archives:
  - name: follow-faults
    url: %s
    suites: [stable]
    components: [main]
    key: %s
source:
  package: follow-kernel-dkms
  path: usr/src/follow-{version}
  select: {branch: "555", suites: [follow-faults]}
modules: [dummy]
kernels:
  releases: [%s]
`, repo.URL, key, testKernel)
		file := filepath.Join(dir, "follow-555.yaml")
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := recipe.Load(file)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	o, f := setup(t, reg.Addr, time.Time{})
	// Its own download cache (the kernels and bookworm's lists are the machine's).
	o.Build.DownloadDir, o.Build.Archives = testenv.DownloadCache(t), nil
	ctx := context.Background()
	pushed := func() int {
		t.Helper()
		recs, _, err := o.Build.Remote.List(ctx)
		if err != nil && !strings.Contains(err.Error(), "name unknown") {
			t.Fatal(err)
		}
		return len(recs)
	}
	cycle := func(key string) (*Report, error) {
		o.Build.Recipes = []*recipe.Recipe{writeRecipe(key)}
		o.Build.Archives = nil
		return Cycle(ctx, o)
	}

	rep, err := cycle("wrong.asc")
	if err == nil || rep != nil || !strings.Contains(err.Error(), "is not signed by the key") || f.calls.Load() != 0 || pushed() != 0 {
		t.Fatalf("archive signed by another key: %v (report %v, %d builds, %d pushed), want a signature error, nothing built or pushed", err, rep, f.calls.Load(), pushed())
	}

	restore := repo.Corrupt("follow-kernel-dkms")
	rep, err = cycle(right)
	if err == nil || rep == nil || rep.Failed != 1 || rep.New != 0 || f.calls.Load() != 0 || pushed() != 0 {
		t.Fatalf("package with a bad checksum: %v (report %+v, %d builds, %d pushed), want a failed cell, nothing built or pushed", err, rep, f.calls.Load(), pushed())
	}
	if msg := rep.Cells[0].Error; !strings.Contains(msg, "Hash Sum mismatch") && !strings.Contains(msg, "hash") && !strings.Contains(msg, "checksum") {
		t.Errorf("bad checksum: the cell's error %q does not say so", msg)
	}
	restore()

	repo.Expire("stable")
	rep, err = cycle(right)
	if err == nil || rep != nil || f.calls.Load() != 0 || pushed() != 0 {
		t.Fatalf("expired Release file: %v (report %v, %d builds, %d pushed), want an error, nothing built or pushed", err, rep, f.calls.Load(), pushed())
	}
	if !strings.Contains(err.Error(), "expired") && !strings.Contains(err.Error(), "Valid-Until") {
		t.Errorf("expired Release file: error %q does not say it expired", err)
	}

	// Mended: a new upload, freshly signed.
	repo.PublishFiles("stable", "follow-kernel-dkms", "555.1.3-1", map[string]string{
		"usr/src/follow-555.1.3/dkms.conf": "PACKAGE_NAME=\"follow\"\nPACKAGE_VERSION=\"555.1.3\"\nBUILT_MODULE_NAME[0]=\"dummy\"\n",
	})
	rep, err = cycle(right)
	if err != nil || rep.New != 1 || rep.Cells[0].Version != "555.1.3" || rep.Cells[0].Published == nil || pushed() != 1 {
		t.Fatalf("mended archive: %v, %+v, %d pushed; want 555.1.3's cell pushed with its date", err, rep, pushed())
	}
}
