package remote

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/modinfo"
	"github.com/kpreload/kpreload/kmodcache/names"
	"github.com/kpreload/kpreload/kmodcache/remote/remotetest"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestPullRefusesSetNames: a registry serves a well-formed cell (a real
// module file, every digest right) whose set.json names a driver, version,
// flavour or kernel that is not a name: the pull is refused, naming the
// field and the value (the record's annotation is checked first, set.json's
// copy of it again by manifest.Validate), before any module is downloaded, and the cache is
// left as it was. Such a version became /opt/kpreload/drivers/<version> and
// /lib/firmware/nvidia/<version> at boot.
func TestPullRefusesSetNames(t *testing.T) {
	const kernel = "6.12.118+deb13-cloud-amd64"
	ko := testenv.SyntheticModule(t, "syn_test", kernel)
	body, err := os.ReadFile(ko)
	if err != nil {
		t.Fatal(err)
	}
	info, err := modinfo.ReadFile(ko)
	if err != nil {
		t.Fatal(err)
	}
	mod := manifest.ModuleFromInfo(info, "syn_test.ko", digest.FromBytes(body).Encoded(), int64(len(body)))
	tests := []struct {
		name                    string
		driver, version, flavor string
		want                    string
	}{
		{"version dot dot", "test", "..", "open", `version annotation ".." starts with '.'`},
		{"version dot", "test", ".", "open", `version annotation "." starts with '.'`},
		{"version as an option", "test", "-1.0", "open", `version annotation "-1.0" starts with '-'`},
		{"driver dot dot", "..", "1.0", "open", `driver annotation ".." starts with '.'`},
		{"flavour dot dot", "test", "1.0", "..", `flavor annotation ".." starts with '.'`},
		{"long version", "test", strings.Repeat("1", 100), "open", `is 100 bytes long`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := remotetest.Start(t)
			key := map[string]string{"schema": "test/1", "case": tt.name}
			tag := manifest.KeyID(key)
			set := &manifest.Manifest{Format: manifest.FormatVersion, Kernel: kernel, Vermagic: info.Vermagic,
				Driver: tt.driver, Version: tt.version, Flavor: tt.flavor, Modules: []manifest.Module{mod}, CacheKey: key}
			set.Canonicalize()
			setJSON, err := manifest.Marshal(set)
			if err != nil {
				t.Fatal(err)
			}
			modDigest := reg.PutBlob(body)
			layers := []ocispec.Descriptor{
				descriptor(MediaTypeSet, reg.PutBlob(setJSON), int64(len(setJSON)), "set.json"),
				descriptor(MediaTypeModule, modDigest, int64(len(body)), mod.File),
			}
			ann := cellAnnotations(tag, StateOK, "test", kernel, tt.driver, tt.version, tt.flavor)
			ann[AnnotationSetID] = manifest.IDOf(setJSON)
			keyJSON, manifestJSON, err := cellManifest(key, layers, ann)
			if err != nil {
				t.Fatal(err)
			}
			reg.PutBlob(keyJSON)
			reg.PutManifest(tag, ocispec.MediaTypeImageManifest, manifestJSON)

			dst, err := store.Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			_, err = openAt(t, reg.URL(), Options{}).Pull(context.Background(), dst, key, false)
			if err == nil {
				t.Fatalf("the pull of %s %.20q %s succeeded", tt.driver, tt.version, tt.flavor)
			}
			for _, want := range []string{tt.want, names.Allowed} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %s", err, want)
				}
			}
			if n := reg.BlobFetches(modDigest); n != 0 {
				t.Errorf("the module was fetched %d times, want 0 (refused before downloading)", n)
			}
			if ents, err := dst.List(); err != nil || len(ents) != 0 {
				t.Errorf("the cache holds %v (%v), want nothing", ents, err)
			}
		})
	}
}
