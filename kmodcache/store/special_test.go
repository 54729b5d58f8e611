package store

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/internal/inroot/inroottest"
	"github.com/kpreload/kpreload/kmodcache/manifest"
)

// TestRecordsRefuseSpecialFiles: every record of the cache a reader opens (a
// set's manifest, a cache key's record, a kernel's boot index) that is a
// FIFO, a device, a directory or larger than MaxRecord is refused at once
// with an error naming it, by the reader and by Verify (which lists only
// regular files in sets/, so it passes over a manifest that is none); none
// is waited on.
func TestRecordsRefuseSpecialFiles(t *testing.T) {
	const kernel = "6.1.0-56-cloud-amd64"
	id := strings.Repeat("ab", 32)
	cacheKey := map[string]string{"recipe": "x"}
	for _, kind := range inroottest.Specials(MaxRecord) {
		for _, rec := range []struct {
			name string
			path func(s *Store) string
			read func(s *Store) error
		}{
			{"manifest", func(s *Store) string { return s.ManifestPath(id) }, func(s *Store) error { _, err := s.Get(id); return err }},
			{"cache key record", func(s *Store) string { return s.keyPath(manifest.KeyID(cacheKey)) }, func(s *Store) error { _, _, err := s.Lookup(cacheKey); return err }},
			{"boot index", func(s *Store) string { return s.IndexPath(kernel) }, func(s *Store) error { _, err := s.Index(kernel); return err }},
		} {
			t.Run(rec.name+" "+kind.Name, func(t *testing.T) {
				s := openStore(t)
				p := rec.path(s)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				kind.Make(t, p)
				inroottest.RefusesAtOnce(t, rec.name, p, kind.Want, func() error { return rec.read(s) })
				// Verify returns, and reports it.
				if rec.name == "manifest" && kind.Name != "too large" {
					var probs []Problem
					if err := inroottest.Within(5*time.Second, func() (err error) { probs, err = s.Verify(context.Background()); return err }); err != nil || len(probs) != 0 {
						t.Errorf("Verify with a manifest that is a %s: %v, %v; want it passed over at once", kind.Name, probs, err)
					}
					return
				}
				inroottest.RefusesAtOnce(t, "Verify with a "+rec.name, p, kind.Want, func() error {
					probs, err := s.Verify(context.Background())
					if err != nil {
						return err
					}
					var msgs []string
					for _, pr := range probs {
						msgs = append(msgs, pr.String())
					}
					if len(msgs) == 0 {
						return nil
					}
					return errorString(strings.Join(msgs, "; "))
				})
			})
		}
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }
