package recipe

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestSharedArchives: an archives.yaml beside the recipes names a real
// signed archive once (its key relative to the file) for every recipe of
// the directory; LoadDir does not take it for a recipe; a bad field is an
// error naming the file, the line and the field.
func TestSharedArchives(t *testing.T) {
	repo := testenv.StartAptArchive(t, "stable")
	repo.Publish("stable", "team-kernel-dkms", "555.3.4-1")
	dir := t.TempDir()
	key, err := os.ReadFile(repo.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "keys"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "keys", "team"+filepath.Ext(repo.Key)), key, 0o644); err != nil {
		t.Fatal(err)
	}
	shared := "archives:\n  - name: team\n    url: " + repo.URL + "\n    suites: [stable]\n    components: [main]\n    key: keys/team" + filepath.Ext(repo.Key) + "\n"
	if err := os.WriteFile(filepath.Join(dir, SharedArchivesFile), []byte(shared), 0o644); err != nil {
		t.Fatal(err)
	}
	text := `name: team-555
driver:
  name: team
flavor: proprietary
source:
  package: team-kernel-dkms
  path: usr/src/team-{version}
  select: {branch: "555", suites: [team]}
modules: [team]
kernels:
  releases: [6.1.0-56-cloud-amd64]
`
	if err := os.WriteFile(filepath.Join(dir, "team-555.yaml"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	rs, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 {
		t.Fatalf("LoadDir loaded %d recipes, want 1 (archives.yaml is no recipe)", len(rs))
	}
	got, pick, err := rs[0].ResolveDriver(context.Background(), &AptArchives{Cache: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if got.Source.Package != "team-kernel-dkms=555.3.4-1" || pick.Suite != "stable" {
		t.Errorf("resolved %q from %q, want team-kernel-dkms=555.3.4-1 from stable", got.Source.Package, pick.Suite)
	}

	bad := strings.Replace(shared, "url: "+repo.URL, "url: ftp://example.org/x", 1)
	if err := os.WriteFile(filepath.Join(dir, SharedArchivesFile), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(filepath.Join(dir, "team-555.yaml"))
	if err == nil || !strings.Contains(err.Error(), SharedArchivesFile+":2") || !strings.Contains(err.Error(), "archives[0].url") {
		t.Errorf("bad shared url: %v, want an error naming archives.yaml:2 and archives[0].url", err)
	}
}
