package remote

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kpreload/kpreload/kmodcache/manifest"
)

// seedCell returns a well-formed cell as a registry serves it: the artifact
// manifest, the key (config blob) and the set manifest.
func seedCell(t testing.TB) (tag string, manifestJSON, keyJSON, setJSON []byte) {
	const kernel = "6.12.118+deb13-cloud-amd64"
	vermagic := kernel + " SMP preempt mod_unload modversions "
	key := map[string]string{"schema": "kpreload-build/2", "driver": "kpreload-edu", "kernel": kernel, "source_sha256": strings.Repeat("ca", 32)}
	set := &manifest.Manifest{
		Format: manifest.FormatVersion, Kernel: kernel, Vermagic: vermagic, Driver: "kpreload-edu", Version: "1.0.0", Flavor: "open",
		Modules: []manifest.Module{
			{Name: "kpreload_edu", File: "kpreload_edu.ko", SHA256: strings.Repeat("2b", 32), Size: 14232, ELFSize: 14232, Vermagic: vermagic,
				Aliases: []string{"pci:v00001234d000011E8sv*sd*bc*sc*i*"}, Depends: []string{"kpreload_dep"}},
			{Name: "kpreload_dep", File: "kpreload_dep.ko.xz", SHA256: strings.Repeat("3c", 32), Size: 4000, ELFSize: 9000, Compression: "xz", Vermagic: vermagic},
		},
		CacheKey:      key,
		SupportedGPUs: &manifest.File{File: manifest.SupportedGPUsFile, SHA256: strings.Repeat("4d", 32), Size: 12},
	}
	set.Canonicalize()
	setJSON, err := manifest.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	tag = manifest.KeyID(key)
	layers := []ocispec.Descriptor{descriptor(MediaTypeSet, digest.FromBytes(setJSON), int64(len(setJSON)), "set.json")}
	for _, m := range set.Modules {
		layers = append(layers, descriptor(MediaTypeModule, digest.NewDigestFromEncoded(digest.SHA256, m.SHA256), m.Size, m.File))
	}
	f := set.SupportedGPUs
	layers = append(layers, descriptor(MediaTypeGPUs, digest.NewDigestFromEncoded(digest.SHA256, f.SHA256), f.Size, f.File))
	ann := cellAnnotations(tag, StateOK, "kpreload-edu-open", set.Kernel, set.Driver, set.Version, set.Flavor)
	ann[AnnotationSetID] = manifest.IDOf(setJSON)
	keyJSON, manifestJSON, err = cellManifest(key, layers, ann)
	if err != nil {
		t.Fatal(err)
	}
	return tag, manifestJSON, keyJSON, setJSON
}

// seedFailure returns the artifact manifest of a failure record.
func seedFailure(t testing.TB) (string, []byte) {
	key := map[string]string{"schema": "kpreload-build/2", "case": "failure"}
	tag := manifest.KeyID(key)
	log := []byte("nv-pci.c:223:9: error: too few arguments\n")
	ann := cellAnnotations(tag, StateFailed, "nvidia-535-open", "6.12.117+deb12-cloud-amd64", "nvidia", "535.261.03", "open")
	ann[AnnotationFirstErr] = "nv-pci.c:223:9: error: too few arguments"
	_, b, err := cellManifest(key, []ocispec.Descriptor{descriptor(MediaTypeBuildLog, digest.FromBytes(log), int64(len(log)), "build.log")}, ann)
	if err != nil {
		t.Fatal(err)
	}
	return tag, b
}

// FuzzParseRecord checks the decoding of an artifact manifest from the
// registry: no panic; a record it accepts is a cell of the tag, in a known
// state, whose names carry no control characters, whose blobs are sha256
// digests of sizes within bounds, and whose Size is their sum.
func FuzzParseRecord(f *testing.F) {
	tag, m, _, _ := seedCell(f)
	f.Add(tag, m)
	ftag, fm := seedFailure(f)
	f.Add(ftag, fm)
	f.Add(tag, []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":"application/vnd.example.sbom","config":{},"layers":[]}`))
	f.Add(tag, []byte(`{"schemaVersion":2,"layers":[`))
	f.Add(tag, []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":"application/vnd.kpreload.cell.v1","config":{"mediaType":"application/vnd.kpreload.cell.key.v1+json","digest":"sha256:`+strings.Repeat("0", 64)+`","size":-1},"layers":[{"size":9223372036854775807}],"annotations":{"dev.kpreload.key":"`+tag+`","dev.kpreload.state":"ok","dev.kpreload.driver":"a\u001b[2J"}}`))
	f.Fuzz(func(t *testing.T, tag string, b []byte) {
		rec, err := parseRecord(tag, "sha256:"+strings.Repeat("0", 64), b)
		if err != nil {
			if rec != nil {
				t.Fatalf("parseRecord returned a record with error %v", err)
			}
			return
		}
		if rec.Tag != tag || rec.manifest.Annotations[AnnotationKey] != tag {
			t.Errorf("record for tag %q names key %q", tag, rec.manifest.Annotations[AnnotationKey])
		}
		if rec.State != StateOK && rec.State != StateFailed {
			t.Errorf("state %q", rec.State)
		}
		if rec.State == StateOK && !manifest.IsDigest(rec.SetID) {
			t.Errorf("built cell with set id %q", rec.SetID)
		}
		for _, s := range []string{rec.Recipe, rec.Kernel, rec.Driver, rec.Version, rec.Flavor, rec.FirstError} {
			if strings.ContainsFunc(s, unicode.IsControl) {
				t.Errorf("record field %q has a control character", s)
			}
		}
		var sum int64
		for _, d := range append([]ocispec.Descriptor{rec.manifest.Config}, rec.manifest.Layers...) {
			if d.Digest.Validate() != nil || d.Digest.Algorithm() != digest.SHA256 || d.Size < 0 || d.Size > maxLayerBytes {
				t.Errorf("accepted descriptor %+v", d)
			}
		}
		for _, d := range rec.manifest.Layers {
			sum += d.Size
		}
		if sum != rec.Size || rec.Size < 0 {
			t.Errorf("Size %d, layers sum to %d", rec.Size, sum)
		}
	})
}

// FuzzPlanPull checks what a pull makes of a cell's manifest, key and set
// manifest: no panic; a plan it accepts is for a valid set built from the
// tag's key, with the record's set id, each of whose files is one layer of
// the artifact of the size the set declares, each layer downloaded once.
func FuzzPlanPull(f *testing.F) {
	tag, m, key, set := seedCell(f)
	f.Add(tag, m, key, set)
	f.Add(tag, m, []byte(`{"schema":"other"}`), set)
	f.Add(tag, m, key, []byte(`{"format":1}`))
	f.Add(tag, m, []byte(`[`), set)
	f.Fuzz(func(t *testing.T, tag string, m, key, set []byte) {
		rec, err := parseRecord(tag, "sha256:"+strings.Repeat("0", 64), m)
		if err != nil {
			return
		}
		plan, err := planPull(rec, key, set)
		if err != nil {
			if plan != nil {
				t.Fatalf("planPull returned a plan with error %v", err)
			}
			return
		}
		if err := plan.set.Validate(); err != nil {
			t.Errorf("planned an invalid set: %v", err)
		}
		var k map[string]string
		if json.Unmarshal(key, &k) != nil || manifest.KeyID(k) != tag || manifest.KeyID(plan.set.CacheKey) != tag {
			t.Errorf("planned a set whose key is not the tag's")
		}
		if manifest.IDOf(set) != rec.SetID {
			t.Errorf("planned set %s, the record names %s", manifest.IDOf(set), rec.SetID)
		}
		size := map[string]int64{}
		for _, mod := range plan.set.Modules {
			size[mod.File] = mod.Size
		}
		if f := plan.set.SupportedGPUs; f != nil {
			size[f.File] = f.Size
		}
		seen := map[digest.Digest]bool{}
		files := 0
		for _, b := range plan.blobs {
			if seen[b.desc.Digest] {
				t.Errorf("blob %s planned twice", b.desc.Digest)
			}
			seen[b.desc.Digest] = true
			if !containsDescriptor(rec.manifest.Layers, b.desc) {
				t.Errorf("planned blob %s is no layer of the artifact", b.desc.Digest)
			}
			for _, f := range b.files {
				if size[f] != b.desc.Size {
					t.Errorf("file %s: set says %d bytes, planned blob %d", f, size[f], b.desc.Size)
				}
				files++
			}
		}
		if files != len(size) {
			t.Errorf("planned %d files, the set has %d", files, len(size))
		}
	})
}

func containsDescriptor(ds []ocispec.Descriptor, d ocispec.Descriptor) bool {
	for _, x := range ds {
		if x.Digest == d.Digest && x.Size == d.Size && x.MediaType == d.MediaType {
			return true
		}
	}
	return false
}

// TestSeedCell: the fuzz seeds are a cell the pull path takes, so the
// fuzzers start from inputs that reach the end of both parsers.
func TestSeedCell(t *testing.T) {
	tag, m, key, set := seedCell(t)
	rec, err := parseRecord(tag, "sha256:"+strings.Repeat("0", 64), m)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := planPull(rec, key, set)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range plan.blobs {
		got = append(got, b.name())
	}
	if want := []string{"kpreload_dep.ko.xz", "kpreload_edu.ko", "supported-gpus.json"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("planned blobs %v, want %v", got, want)
	}
	ftag, fm := seedFailure(t)
	if rec, err := parseRecord(ftag, "sha256:"+strings.Repeat("0", 64), fm); err != nil || rec.State != StateFailed || rec.FirstError == "" {
		t.Errorf("failure seed = %+v, %v", rec, err)
	}
}
