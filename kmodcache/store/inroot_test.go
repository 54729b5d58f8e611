package store

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/kpreload/kpreload/internal/inroot/inroottest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestOpenInStaysInRoot: a cache opened inside a root (OpenIn) works as
// one opened by its path (add, a download in its TempDir added, verify,
// copy, remove, repair), and with a link out of the root at one of its
// places (a directory, the lock, an object's fan-out directory), or a
// source file named in the root that is a link out, every operation either
// fails or stays inside the root: the tree beside the root is unchanged.
func TestOpenInStaysInRoot(t *testing.T) {
	const kernel = "6.1.0-56-cloud-amd64"
	const dir = "var/lib/kpreload/cache"
	ko := testenv.SyntheticModule(t, "syn_inroot", kernel)
	ctx := context.Background()
	run := func(t *testing.T, root string) error {
		st, err := OpenIn(root, dir)
		if err != nil {
			return err
		}
		m, id, err := st.AddFiles(ctx, AddRequest{Driver: "syn", Version: "1", Files: []string{ko}, CacheKey: map[string]string{"k": "1"}})
		if err != nil {
			return err
		}
		// A download: the module written into a TempDir of the cache, added
		// again as the same set from there.
		tmp, err := st.TempDir(ctx, "pull")
		if err != nil {
			return err
		}
		defer tmp.Remove()
		f, p, err := tmp.Create(m.Modules[0].SHA256)
		if err != nil {
			return err
		}
		in, err := os.Open(ko)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(f, in)
		in.Close()
		f.Close()
		if err != nil {
			return err
		}
		got, err := st.Add(ctx, m, map[string]string{m.Modules[0].File: p}, false)
		if err != nil {
			return err
		}
		if got != id {
			t.Errorf("the set added again from the TempDir is %s, want %s", got, id)
		}
		if probs, err := st.Verify(ctx); err != nil || len(probs) > 0 {
			t.Errorf("Verify = %v, %v; want a clean cache", probs, err)
		}
		other, err := OpenIn(root, "var/lib/kpreload/other")
		if err != nil {
			return err
		}
		if _, err := st.CopySet(ctx, other, id); err != nil {
			return err
		}
		if err := st.Remove(ctx, id); err != nil {
			return err
		}
		_, err = st.Repair(ctx)
		return err
	}

	t.Run("no link", func(t *testing.T) {
		root := t.TempDir()
		if err := run(t, root); err != nil {
			t.Fatal(err)
		}
		if ents, err := os.ReadDir(filepath.Join(root, "var/lib/kpreload/other/sets")); err != nil || len(ents) != 1 {
			t.Errorf("the copied set in the root: %v, %v", ents, err)
		}
	})
	for _, link := range []string{"objects", "objects/sha256", "sets", "keys", "index", ".lock"} {
		t.Run(link, func(t *testing.T) {
			root, victim := t.TempDir(), t.TempDir()
			inroottest.Victim(t, victim)
			full := filepath.Join(root, dir, link)
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(victim, full); err != nil {
				t.Fatal(err)
			}
			before := inroottest.Snapshot(t, victim)
			err := run(t, root)
			if got := inroottest.Snapshot(t, victim); got != before {
				t.Fatalf("with %s a link out (err %v), the tree beside the root changed:\nbefore\n%s\nafter\n%s", link, err, before, got)
			}
			if err == nil {
				t.Errorf("with %s a link out of the root: no error", link)
			}
		})
	}
	t.Run("source a link out", func(t *testing.T) {
		root := t.TempDir()
		st, err := OpenIn(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		m, _, err := openStore(t).AddFiles(ctx, AddRequest{Driver: "syn", Version: "1", Files: []string{ko}})
		if err != nil {
			t.Fatal(err)
		}
		evil := filepath.Join(root, dir, ".tmp-pull-x", "module")
		if err := os.MkdirAll(filepath.Dir(evil), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(ko, evil); err != nil { // absolute: inside the root it leads nowhere
			t.Fatal(err)
		}
		if _, err := st.Add(ctx, m, map[string]string{m.Modules[0].File: evil}, false); err == nil {
			t.Errorf("Add of a source in the root that links out read %s from outside the root", ko)
		}
	})
}
