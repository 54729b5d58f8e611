package remote

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kpreload/kpreload/kmodcache/cellsign"
	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/names"
	"github.com/kpreload/kpreload/kmodcache/names/namestest"
)

// TestRecordRefusesOutsideNames: a cell whose kernel, driver, version or
// flavour is a value outside the name grammar (namestest's fixed and seeded
// random cases but "", which a failure record may leave out) is refused
// wherever the registry puts it: in the artifact manifest's annotations
// (parseRecord, under every lookup, listing and pull) or, with the
// annotations good, in the statement a trusted key signed (verify, under
// every pull with --trust).
func TestRecordRefusesOutsideNames(t *testing.T) {
	dir := t.TempDir()
	signer, err := cellsign.Generate(filepath.Join(dir, "key"), filepath.Join(dir, "key.pub"))
	if err != nil {
		t.Fatal(err)
	}
	key := map[string]string{"schema": "test/1", "case": "names"}
	tag := manifest.KeyID(key)
	setID := strings.Repeat("5e", 32)
	good := map[string]string{"kernel": "6.1.0-56-cloud-amd64", "driver": "nvidia", "version": "535.261.03", "flavor": "open"}
	// cell returns the artifact manifest of the cell good describes, its
	// annotations' field set to ann and its statement's to signed.
	cell := func(field, ann, signed string) []byte {
		a := cellAnnotations(tag, StateOK, "nvidia-535-open", good["kernel"], good["driver"], good["version"], good["flavor"])
		a[AnnotationSetID] = setID
		st := cellsign.Statement{Key: tag, State: StateOK, Subject: setID, Driver: good["driver"], Version: good["version"], Flavor: good["flavor"],
			Kernel: good["kernel"], Recipe: "nvidia-535-open", Created: a[ocispec.AnnotationCreated], Generation: 1}
		at := map[string]*string{"kernel": &st.Kernel, "driver": &st.Driver, "version": &st.Version, "flavor": &st.Flavor}
		if field != "" {
			a[annotationPrefix+field] = ann
			*at[field] = signed
		}
		b, sig, err := signer.Sign(st)
		if err != nil {
			t.Fatal(err)
		}
		a[AnnotationStatement], a[AnnotationSigner], a[AnnotationSignature] = string(b), sig.KeyID, sig.Value
		layers := []ocispec.Descriptor{descriptor(MediaTypeSet, digest.NewDigestFromEncoded(digest.SHA256, setID), 100, "set.json")}
		_, m, err := cellManifest(key, layers, a)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	dgst := "sha256:" + strings.Repeat("0", 64)
	if rec, err := parseRecord(tag, dgst, cell("", "", "")); err != nil {
		t.Fatalf("parseRecord of the good cell: %v", err)
	} else if err := rec.verify(signer.Trust()); err != nil {
		t.Fatalf("verify of the good cell: %v", err)
	}
	for _, c := range namestest.All(300) {
		if c.Value == "" {
			continue
		}
		for field, v := range good {
			if rec, err := parseRecord(tag, dgst, cell(field, c.Value, v)); !errors.Is(err, names.ErrInvalid) || !strings.Contains(err.Error(), field+" annotation") {
				t.Errorf("%s %s annotation %.80q: parseRecord = %+v, %v; want it refused by the name grammar", c.Kind, field, c.Value, rec, err)
			}
			rec, err := parseRecord(tag, dgst, cell(field, v, c.Value))
			if err != nil {
				t.Fatalf("%s %s statement %.80q: parseRecord: %v", c.Kind, field, c.Value, err)
			}
			if err := rec.verify(signer.Trust()); !errors.Is(err, cellsign.ErrBadStatement) || !errors.Is(err, names.ErrInvalid) {
				t.Errorf("%s %s statement %.80q: verify = %v; want it refused by the name grammar", c.Kind, field, c.Value, err)
			}
			if rec.Trust == TrustVerified || rec.Driver != good["driver"] || rec.Kernel != good["kernel"] {
				t.Errorf("%s %s statement %.80q: a refused record took the statement's fields: %+v", c.Kind, field, c.Value, rec)
			}
		}
	}
}
