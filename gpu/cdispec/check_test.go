package cdispec

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/gpu/activate"
)

// TestVerify: the active test driver's spec as refresh wrote it matches;
// missing, another version's, a foreign file at kpreload's name, a spec
// left for a driver that is not active, and no driver at all are each told.
func TestVerify(t *testing.T) {
	refreshed := func(t *testing.T, version string) string {
		t.Helper()
		root := eduTree(t, version)
		if _, err := RefreshActive(root, Options{}); err != nil {
			t.Fatal(err)
		}
		return root
	}
	put := func(t *testing.T, root, file, content string) {
		t.Helper()
		p := filepath.Join(root, file)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// conflicts are the cases with a conflict, and how it starts.
	conflicts := map[string][]string{
		"a foreign spec of the same names beside it": {"/var/run/cdi/other.yaml (not written by kpreload) also defines kpreload.dev/edu=all in /var/run/cdi: container runtimes refuse"},
	}
	for _, tc := range []struct {
		name     string
		root     func(t *testing.T) string
		state    string
		why      string
		stale    []string
		noDriver bool
		wantFile string
	}{
		{"as refreshed", func(t *testing.T) string { return refreshed(t, "1.0.0") }, SpecMatches, "", nil, false, EduSpecFile},
		{"written with another hook path", func(t *testing.T) string {
			root := eduTree(t, "1.0.0")
			if _, err := RefreshActive(root, Options{HookPath: "/usr/local/bin/kpreload"}); err != nil {
				t.Fatal(err)
			}
			return root
		}, SpecMatches, "", nil, false, EduSpecFile},
		{"missing", func(t *testing.T) string { return eduTree(t, "1.0.0") }, SpecMissing, "no spec at " + EduSpecFile, nil, false, EduSpecFile},
		{"another version", func(t *testing.T) string {
			root := refreshed(t, "1.0.0")
			// The driver moved to 2.0.0 without a refresh.
			drv := filepath.Join(activate.DriversDir, "2.0.0")
			put(t, root, filepath.Join(drv, "usr/lib/x86_64-linux-gnu/libkpreload_edu.so.2.0.0"), "lib")
			run := filepath.Join(root, activate.RunDir)
			if err := activate.Point(run, root, activate.DriversDir, "2.0.0"); err != nil {
				t.Fatal(err)
			}
			if err := activate.MarkReady(run, activate.Ready{Driver: EduDriver, Version: "2.0.0"}); err != nil {
				t.Fatal(err)
			}
			return root
		}, SpecDiffers, "the spec describes version 1.0.0, the loaded driver is 2.0.0", nil, false, EduSpecFile},
		{"not kpreload's", func(t *testing.T) string {
			root := eduTree(t, "1.0.0")
			put(t, root, EduSpecFile, "cdiVersion: 0.5.0\nkind: kpreload.dev/edu\n")
			return root
		}, SpecNotOwn, "no kpreload marker", nil, false, EduSpecFile},
		{"a stale NVIDIA spec", func(t *testing.T) string {
			root := refreshed(t, "1.0.0")
			put(t, root, DefaultSpecFile, string(Mark([]byte("stale"))))
			return root
		}, SpecMatches, "", []string{DefaultSpecFile}, false, EduSpecFile},
		{"a foreign spec of the same names beside it", func(t *testing.T) string {
			root := refreshed(t, "1.0.0")
			put(t, root, "/var/run/cdi/other.yaml", "cdiVersion: 0.5.0\nkind: kpreload.dev/edu\ndevices:\n  - name: all\n    containerEdits:\n      deviceNodes:\n        - path: /dev/null\n")
			return root
		}, SpecMatches, "", nil, false, EduSpecFile},
		{"no driver, a spec left", func(t *testing.T) string {
			root := refreshed(t, "1.0.0")
			if err := activate.ClearReady(filepath.Join(root, activate.RunDir)); err != nil {
				t.Fatal(err)
			}
			return root
		}, SpecNone, "no driver is active", []string{EduSpecFile}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Verify(tc.root(t))
			if err != nil {
				t.Fatal(err)
			}
			if want := conflicts[tc.name]; len(got.Conflicts) != len(want) || len(want) == 1 && !strings.HasPrefix(got.Conflicts[0], want[0]) {
				t.Errorf("Verify conflicts %q, want %q", got.Conflicts, want)
			}
			if got.State != tc.state || !strings.Contains(got.Why, tc.why) || (tc.why == "" && got.Why != "") ||
				!slices.Equal(got.Stale, tc.stale) || got.File != tc.wantFile || (got.Driver == "") != tc.noDriver {
				t.Errorf("Verify = %+v\nwant state %s, why %q, stale %q, file %q", got, tc.state, tc.why, tc.stale, tc.wantFile)
			}
		})
	}
}
