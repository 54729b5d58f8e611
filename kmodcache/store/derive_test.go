package store

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/fsverity"
	"github.com/kpreload/kpreload/kmodcache/manifest"
)

// TestAddRefusesForgedMetadata adds a set of real modules through Add (the
// path a pull takes) with one field of its manifest changed at a time: each
// is refused, naming the field, and the cache stays empty.
func TestAddRefusesForgedMetadata(t *testing.T) {
	files := moduleFiles(t, k61)
	src := openStore(t)
	m, _ := addSet(t, src, AddRequest{Driver: "virtio", Version: "1", Files: files})
	byName := map[string]string{}
	for _, f := range files {
		byName[filepath.Base(f)] = f
	}
	tests := []struct {
		name, want string
		forge      func(m *manifest.Manifest)
	}{
		{"srcversion", "srcversion", func(m *manifest.Manifest) { m.Modules[0].Srcversion = "FORGED" }},
		{"aliases for every device", "aliases", func(m *manifest.Manifest) { m.Modules[0].Aliases = []string{"*", "pci:*"} }},
		{"an alias more", "aliases", func(m *manifest.Manifest) {
			m.Modules[0].Aliases = append(m.Modules[0].Aliases, "pci:v000010DEd*sv*sd*bc*sc*i*")
		}},
		{"signature", "signed", func(m *manifest.Manifest) {
			m.Modules[0].Signed = !m.Modules[0].Signed
			m.Modules[0].Signer, m.Modules[0].SigKey = "", ""
		}},
		{"signer", "signer", func(m *manifest.Manifest) {
			m.Modules[0].Signed, m.Modules[0].Signer, m.Modules[0].SigKey = true, "a key the module was not signed with", "01:02"
		}},
		{"no dependencies", "depends", func(m *manifest.Manifest) {
			for i := range m.Modules {
				if len(m.Modules[i].Depends) > 0 {
					m.Modules[i].Depends = nil
					m.External = nil
				}
			}
		}},
		{"firmware", "firmware", func(m *manifest.Manifest) {
			m.Modules[0].Firmware = []string{"evil.bin"}
			m.Firmware = []string{"evil.bin"}
		}},
		{"version", "version", func(m *manifest.Manifest) { m.Modules[0].Version = "9.9.9" }},
		{"fs-verity digest", "verity", func(m *manifest.Manifest) {
			m.Modules[0].Verity = "sha256:" + strings.Repeat("00", 32)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forged := m.Clone()
			tt.forge(forged)
			dst := openStore(t)
			_, err := dst.Add(context.Background(), forged, byName, true)
			if err == nil || !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Add(forged %s) error = %v, want a refusal naming %q", tt.name, err, tt.want)
			}
			if got, _ := dst.List(); len(got) != 0 {
				t.Errorf("after the refused Add the cache holds %d sets, want 0", len(got))
			}
			if n := countObjects(t, dst); n != 0 {
				t.Errorf("after the refused Add the cache holds %d objects, want 0", n)
			}
		})
	}
	// The honest manifest goes in.
	if _, err := openStore(t).Add(context.Background(), m, byName, true); err != nil {
		t.Errorf("Add(honest manifest) = %v", err)
	}
}

// TestVerityRecorded: AddFiles records each module file's fs-verity digest
// as the file's bytes give it, and a set that records none (made before
// kpreload recorded them) still goes in through Add, its id unchanged and
// its boot index entries without one.
func TestVerityRecorded(t *testing.T) {
	files := moduleFiles(t, k61)
	m, _ := addSet(t, openStore(t), AddRequest{Driver: "virtio", Version: "1", Files: files})
	byName := map[string]string{}
	for _, f := range files {
		byName[filepath.Base(f)] = f
	}
	for _, mod := range m.Modules {
		f, err := os.Open(byName[mod.File])
		if err != nil {
			t.Fatal(err)
		}
		want, err := fsverity.Digest(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if mod.Verity != want {
			t.Errorf("module %s: Verity = %q, want %q", mod.File, mod.Verity, want)
		}
	}
	old := m.Clone()
	for i := range old.Modules {
		old.Modules[i].Verity = ""
	}
	wantID, err := manifest.ID(old)
	if err != nil {
		t.Fatal(err)
	}
	dst := openStore(t)
	id, err := dst.Add(context.Background(), old, byName, true)
	if err != nil {
		t.Fatalf("Add(set without fs-verity digests) = %v", err)
	}
	if id != wantID {
		t.Errorf("Add(set without fs-verity digests) id = %s, want %s", id, wantID)
	}
	ix, err := dst.Index(old.Kernel)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ix.Sets {
		for _, mod := range s.Modules {
			if mod.Verity != "" {
				t.Errorf("boot index module %s: Verity = %q, want none", mod.Name, mod.Verity)
			}
		}
	}
}

// TestVerifyReportsForgedMetadata puts a manifest that lies about its module
// into an existing cache (consistent ids, as if an older kpreload had let it
// in) and wants Verify to report it.
func TestVerifyReportsForgedMetadata(t *testing.T) {
	s := openStore(t)
	m, id := addSet(t, s, AddRequest{Driver: "virtio", Version: "1", Files: moduleFiles(t, k61)})
	mustVerifyClean(t, s)
	forged := m.Clone()
	forged.Modules[0].Aliases = []string{"*", "pci:*"}
	forged.Canonicalize()
	b, err := manifest.Marshal(forged)
	if err != nil {
		t.Fatal(err)
	}
	fid := manifest.IDOf(b)
	if err := os.Remove(s.ManifestPath(id)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.ManifestPath(fid), b, 0o444); err != nil {
		t.Fatal(err)
	}
	probs, err := s.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range probs {
		if p.Kind == ProblemMetadataMismatch {
			got = append(got, p.String())
		}
	}
	if len(got) != 1 || !strings.Contains(got[0], "aliases") || !strings.Contains(got[0], fid[:12]) {
		t.Errorf("Verify() metadata problems = %q, want one naming set %.12s and its aliases (all: %v)", got, fid, probs)
	}
}
