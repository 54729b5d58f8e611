package followcmd

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/kmodcache/cellsign"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestFollowFailsFast: follow reaches the registry before anything else.
// A closed port, and a registry that answers 401 to a client without
// credentials, each stop the cycle in under 5 s with one line naming the
// registry, and a fresh download cache stays empty: no apt lists, no
// kernel, no lock.
func TestFollowFailsFast(t *testing.T) {
	recipes, err := filepath.Abs("../../../../recipes")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	if err := os.Symlink(recipes, "recipes"); err != nil {
		t.Fatal(err)
	}
	if _, err := cellsign.Generate("KEY", "KEY.pub"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	t.Setenv("KPRELOAD_CACHE_DIR", filepath.Join(t.TempDir(), "cells"))
	unauthorized := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Basic realm="kpreload-test"`)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(unauthorized.Close)
	for _, tt := range []struct{ remote, want string }{
		{"oci://127.0.0.1:1/x", "connection refused"},
		{"oci://" + strings.TrimPrefix(unauthorized.URL, "http://") + "/x", "basic credential not found (the registry wants credentials"},
	} {
		downloads := filepath.Join(t.TempDir(), "downloads")
		if err := os.Mkdir(downloads, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Setenv("KPRELOAD_CACHE", downloads)
		args := []string{"follow", "--remote", tt.remote, "--sign", "KEY", "testdriver"}
		if strings.Contains(tt.want, "credential") {
			args = append(args, "--plain-http")
		}
		start := time.Now()
		code, out, errOut := runCLI(args...)
		took := time.Since(start)
		if code == 0 || took > 5*time.Second || out != "" || strings.Count(errOut, "\n") != 1 ||
			!strings.HasPrefix(errOut, "kpreload: follow: registry "+tt.remote+": ") || !strings.Contains(errOut, tt.want) {
			t.Errorf("kpreload %s: exit %d in %s, stdout %q, stderr %q; want a non-zero exit within 5 s and one line naming the registry, containing %q", strings.Join(args, " "), code, took, out, errOut, tt.want)
		}
		if ents, err := os.ReadDir(downloads); err != nil || len(ents) != 0 {
			t.Errorf("kpreload %s left %d entries in the download cache (%v), want none", strings.Join(args, " "), len(ents), err)
		}
		t.Logf("kpreload %s: exit %d in %s: %s", strings.Join(args, " "), code, took.Round(time.Millisecond), errOut)
	}
}

// TestFollowCells: follow with no RECIPE follows every recipe of the
// recipes directory; with some, those.
func TestFollowCells(t *testing.T) {
	recipes := filepath.Join(testenv.RepoRoot(t), "recipes")
	all, kernels, err := followCells(nil, recipes)
	if err != nil || len(all) < 2 || len(kernels) != 0 {
		t.Fatalf("followCells(none) = %d recipes, %v, %v; want every recipe of %s", len(all), kernels, err, recipes)
	}
	some, kernels, err := followCells([]string{"testdriver:6.1.0-56-cloud-amd64"}, recipes)
	if err != nil || len(some) != 1 || some[0].Name != "testdriver" || len(kernels[some[0]]) != 1 {
		t.Errorf("followCells(testdriver:KVER) = %v, %v, %v; want testdriver for one kernel", some, kernels, err)
	}
	if _, _, err := followCells(nil, filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Error("followCells(none) of an absent directory: no error")
	}
}
