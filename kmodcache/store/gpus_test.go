package store

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/manifest"
)

// TestSupportedGPUsObject: a set added with a supported-gpus.json stores it
// as an object named in the manifest and in the boot index (relative to the
// set's Dir), Verify checks it, and removing the set collects it.
func TestSupportedGPUsObject(t *testing.T) {
	s := openStore(t)
	gpus := filepath.Join(t.TempDir(), "supported-gpus.json")
	data := []byte(`{"chips":[{"devid":"0x2335","name":"NVIDIA H200","features":["kernelopen"]}]}` + "\n")
	if err := os.WriteFile(gpus, data, 0o644); err != nil {
		t.Fatal(err)
	}
	m, id := addSet(t, s, AddRequest{Driver: "nvidia", Version: "535.261.03", Flavor: "open", Files: moduleFiles(t, k61), SupportedGPUs: gpus})
	want := manifest.File{File: manifest.SupportedGPUsFile, SHA256: sha256File(t, gpus), Size: int64(len(data))}
	if m.SupportedGPUs == nil || *m.SupportedGPUs != want {
		t.Fatalf("manifest supported_gpus = %+v, want %+v", m.SupportedGPUs, want)
	}
	got, err := s.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	if got.SupportedGPUs == nil || *got.SupportedGPUs != want {
		t.Errorf("stored manifest supported_gpus = %+v, want %+v", got.SupportedGPUs, want)
	}
	ix, err := s.Index(k61)
	if err != nil {
		t.Fatal(err)
	}
	if len(ix.Sets) != 1 || ix.Sets[0].SupportedGPUs == "" {
		t.Fatalf("index sets = %+v, want one with supported_gpus", ix.Sets)
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(s.IndexPath(k61)), ix.Sets[0].Dir, ix.Sets[0].SupportedGPUs))
	if err != nil || !bytes.Equal(b, data) {
		t.Errorf("index's supported-gpus.json = %q (%v), want %q", b, err, data)
	}
	mustVerifyClean(t, s)

	// A corrupt supported-gpus object is reported, naming the file.
	obj := s.ObjectPath(want.SHA256)
	if err := os.Chmod(obj, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(obj, []byte(`{"chips":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	probs, err := s.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(probs) != 1 || probs[0].Kind != ProblemCorruptObject || !slices.Contains(probs[0].Modules, manifest.SupportedGPUsFile) {
		t.Errorf("Verify = %v, want one corrupt-object problem naming %s", probs, manifest.SupportedGPUsFile)
	}

	if err := s.Remove(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(obj); !os.IsNotExist(err) {
		t.Errorf("after Remove, the supported-gpus object %s: %v, want it collected", obj, err)
	}
}

// TestManifestRejectsBadSupportedGPUs: Validate names each problem of a
// supported-gpus entry.
func TestManifestRejectsBadSupportedGPUs(t *testing.T) {
	s := openStore(t)
	m, _ := addSet(t, s, AddRequest{Driver: "nvidia", Version: "1", Files: moduleFiles(t, k61)})
	m.SupportedGPUs = &manifest.File{File: "gpus.txt", SHA256: "x", Size: 0}
	err := m.Validate()
	if err == nil {
		t.Fatal("Validate accepted a bad supported-gpus entry")
	}
	for _, want := range []string{`file name "gpus.txt"`, `sha256 "x"`, "size 0"} {
		if !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("Validate error %q lacks %q", err, want)
		}
	}
}

// TestCopySet: a set copied into another cache keeps its id, its objects
// and its supported-gpus.json, and the copy is a healthy cache.
func TestCopySet(t *testing.T) {
	src := openStore(t)
	gpus := filepath.Join(t.TempDir(), "supported-gpus.json")
	if err := os.WriteFile(gpus, []byte(`{"chips":[{"devid":"0x2335"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, id := addSet(t, src, AddRequest{Driver: "nvidia", Version: "1", Files: moduleFiles(t, k61), SupportedGPUs: gpus})
	addSet(t, src, AddRequest{Driver: "other", Version: "1", Files: moduleFiles(t, k612)})
	dst := openStore(t)
	got, err := src.CopySet(context.Background(), dst, id)
	if err != nil {
		t.Fatal(err)
	}
	if got != id {
		t.Errorf("CopySet id = %s, want %s", got, id)
	}
	ents, err := dst.List()
	if err != nil || len(ents) != 1 || ents[0].ID != id {
		t.Errorf("copy lists %+v (%v), want only set %s", ents, err, id)
	}
	mustVerifyClean(t, dst)
	m, err := dst.Get(id)
	if err != nil || m.SupportedGPUs == nil {
		t.Fatalf("copied manifest %+v (%v), want supported_gpus", m, err)
	}
	if _, err := os.Stat(dst.ObjectPath(m.SupportedGPUs.SHA256)); err != nil {
		t.Errorf("copied supported-gpus object: %v", err)
	}
}
