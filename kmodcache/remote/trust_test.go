package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kpreload/kpreload/kmodcache/cellsign"
	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/remote/remotetest"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// signedCell is a cell a test pushed, signed.
type signedCell struct {
	key map[string]string
	tag string
	id  string
	src *store.Store
}

// pushSigned pushes a set of driver virtio 1 (one identity for every
// cell) built from the key {"cell": cell}, signed by s, as recipe's cell.
func pushSigned(t *testing.T, reg *remotetest.Registry, s *cellsign.Signer, cell, recipe string) *signedCell {
	t.Helper()
	c := &signedCell{key: map[string]string{"schema": "test", "cell": cell}, src: emptyStore(t)}
	c.tag = manifest.KeyID(c.key)
	c.id = remotetest.AddSet(t, c.src, remotetest.Set{KernelTree: testenv.KernelTree(t, remotetest.Kernel), Driver: "virtio", Version: "1", Key: c.key})
	if _, err := openAt(t, reg.URL(), Options{Signer: s}).PushSet(context.Background(), c.src, c.id, recipe); err != nil {
		t.Fatal(err)
	}
	return c
}

// annotate rewrites the annotations of the manifest tagged tag, as a
// registry (or anyone who can push to it) may: the signature stays.
func annotate(t *testing.T, reg *remotetest.Registry, tag string, edit func(map[string]string)) {
	t.Helper()
	b, mt, _ := reg.Manifest(tag)
	var m ocispec.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m.Annotations)
	b, _ = json.Marshal(m)
	reg.PutManifest(tag, mt, b)
}

// hide makes the registry list only the tags keep accepts and answer 404
// for the others.
func hide(reg *remotetest.Registry, tags ...string) {
	for _, tag := range tags {
		reg.HandleManifest(tag, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}`)
		})
	}
	reg.HandleTags(func(w http.ResponseWriter, _ *http.Request) {
		var shown []string
		for _, tag := range reg.Tags() {
			if !slices.Contains(tags, tag) {
				shown = append(shown, tag)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"name": remotetest.Repo, "tags": shown})
	})
}

// TestSignedFieldsDecide: the registry rewrites the unsigned recipe and
// creation annotations of the older of two signed cells of one identity so
// that by them it is the newer and sorts first (and the newer one's
// creation time so that it looks old). The listing shows the signed names
// only, and the newest signed cell is the one selected and pulled.
func TestSignedFieldsDecide(t *testing.T) {
	ctx := context.Background()
	team, trust := keys(t, "team")
	reg := remotetest.Start(t)
	older := pushSigned(t, reg, team, "older", "virtio")
	newer := pushSigned(t, reg, team, "newer", "virtio")
	annotate(t, reg, older.tag, func(a map[string]string) {
		a[AnnotationRecipe] = "a-forged"
		a[ocispec.AnnotationCreated] = "2099-01-01T00:00:00Z"
	})
	annotate(t, reg, newer.tag, func(a map[string]string) { a[ocispec.AnnotationCreated] = "2000-01-01T00:00:00Z" })

	r := openAt(t, reg.URL(), Options{Trust: trust})
	recs, refused, err := r.List(ctx)
	if err != nil || len(refused) != 0 || len(recs) != 2 {
		t.Fatalf("List = %v, %v, %v; want the two cells", recs, refused, err)
	}
	for _, rec := range recs {
		if rec.Recipe != "virtio" || rec.Created.Year() < 2020 || rec.Created.Year() > 2090 || rec.Trust != TrustVerified || rec.Generation == 0 {
			t.Errorf("record %s: recipe %q, created %s, trust %q, generation %d; want the signed recipe virtio and time, verified, a generation",
				short(rec.Tag), rec.Recipe, rec.Created, rec.Trust, rec.Generation)
		}
	}
	if recs[0].Tag != newer.tag {
		t.Errorf("List's first record of the cell is %s, want the newer signed cell %s", short(recs[0].Tag), short(newer.tag))
	}
	st := emptyStore(t)
	newest, rollbacks, err := r.Select(st, recs, nil)
	if err != nil || len(rollbacks) != 0 || len(newest) != 1 || newest[0].Tag != newer.tag {
		t.Fatalf("Select = %v, %v, %v; want the newer cell %s alone", newest, rollbacks, err, short(newer.tag))
	}
	if res, err := r.PullRecord(ctx, st, newest[0], false); err != nil || res.SetID != newer.id {
		t.Errorf("PullRecord(newest) = %+v, %v; want set %s", res, err, newer.id)
	}

	// Without trust the annotations are all there is, and records say so.
	recs, _, err = openAt(t, reg.URL(), Options{}).List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if rec.Trust != TrustUnverified || rec.Generation != 0 {
			t.Errorf("record %s without trust: trust %q, generation %d; want unverified and none", short(rec.Tag), rec.Trust, rec.Generation)
		}
	}
}

// wantRollback fails unless errs is one error wrapping ErrRollback that
// names each generation in gens and says what.
func wantRollback(t *testing.T, what string, errs []error, says string, gens ...uint64) {
	t.Helper()
	if len(errs) != 1 || !errors.Is(errs[0], ErrRollback) || !strings.Contains(errs[0].Error(), says) {
		t.Fatalf("%s: %v, want one rollback error saying %q", what, errs, says)
	}
	for _, g := range gens {
		if !strings.Contains(errs[0].Error(), fmt.Sprintf("generation %d", g)) {
			t.Errorf("%s: %v does not name generation %d", what, errs[0], g)
		}
	}
}

// TestRollbackAndFreeze: a cache that has seen the newer of two signed
// cells of one identity refuses the older when the registry hides the
// newer, naming both generations, and reports the identity when the
// registry hides both; its set stays. Another repository is not held to
// what the first showed.
func TestRollbackAndFreeze(t *testing.T) {
	ctx := context.Background()
	team, trust := keys(t, "team")
	reg := remotetest.Start(t)
	r := openAt(t, reg.URL(), Options{Trust: trust})
	st := emptyStore(t)
	pull := func() ([]*Record, []error) {
		t.Helper()
		recs, _, err := r.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		newest, rollbacks, err := r.Select(st, recs, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range newest {
			if _, err := r.PullRecord(ctx, st, rec, true); err != nil {
				t.Fatal(err)
			}
		}
		return newest, rollbacks
	}
	a := pushSigned(t, reg, team, "a", "virtio")
	if newest, rb := pull(); len(newest) != 1 || newest[0].Tag != a.tag || rb != nil {
		t.Fatalf("first pull took %v, %v; want cell a", newest, rb)
	}
	b := pushSigned(t, reg, team, "b", "virtio")
	newest, rb := pull()
	if len(newest) != 1 || newest[0].Tag != b.tag || rb != nil {
		t.Fatalf("second pull took %v, %v; want cell b", newest, rb)
	}
	recB := newest[0]
	recA, err := r.Lookup(ctx, a.key)
	if err != nil {
		t.Fatal(err)
	}

	hide(reg, b.tag)
	newest, rb = pull()
	if len(newest) != 0 {
		t.Errorf("with the newest hidden the pull took %v, want nothing", newest)
	}
	wantRollback(t, "the newest hidden, an older one offered", rb, "older than", recA.Generation, recB.Generation)

	hide(reg, a.tag, b.tag)
	newest, rb = pull()
	if len(newest) != 0 {
		t.Errorf("with every cell hidden the pull took %v, want nothing", newest)
	}
	wantRollback(t, "every cell hidden", rb, "offers no built cell", recB.Generation)
	if ents, _ := st.List(); len(ents) != 1 || ents[0].ID != b.id {
		t.Errorf("the cache holds %v, want the newest set %s", ents, b.id)
	}

	// Another repository is another history: what this cache saw in the
	// first is not missing from it.
	other := openAt(t, remotetest.Start(t).URL(), Options{Trust: trust})
	if newest, rb, err := other.Select(st, nil, nil); err != nil || len(newest) != 0 || len(rb) != 0 {
		t.Errorf("Select(another, empty repository) = %v, %v, %v; want nothing and no rollback", newest, rb, err)
	}
}

// TestSameKeyRollback: the team pushes a cell again (the registry had an
// unsigned copy under its key); a cache that pulled the new push refuses
// the old one when the registry serves it again under the key, naming
// both generations.
func TestSameKeyRollback(t *testing.T) {
	ctx := context.Background()
	team, trust := keys(t, "team")
	reg := remotetest.Start(t)
	c := pushSigned(t, reg, team, "c", "virtio")
	first, _, _ := reg.Manifest(c.tag)
	r := openAt(t, reg.URL(), Options{Trust: trust})
	st := emptyStore(t)
	rec1, err := r.Lookup(ctx, c.key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Pull(ctx, st, c.key, false); err != nil {
		t.Fatal(err)
	}
	annotate(t, reg, c.tag, func(a map[string]string) { delete(a, AnnotationSignature) })
	if res, err := openAt(t, reg.URL(), Options{Signer: team}).PushSet(ctx, c.src, c.id, "virtio"); err != nil || !res.Pushed {
		t.Fatalf("push again over an unsigned copy = %+v, %v; want pushed", res, err)
	}
	rec2, err := r.Lookup(ctx, c.key)
	if err != nil || rec2.Generation <= rec1.Generation {
		t.Fatalf("Lookup after the second push = %+v, %v; want a generation above %d", rec2, err, rec1.Generation)
	}
	if _, err := r.Pull(ctx, st, c.key, true); err != nil {
		t.Fatal(err)
	}
	reg.PutManifest(c.tag, ocispec.MediaTypeImageManifest, first)
	_, err = r.Pull(ctx, st, c.key, true)
	var errs []error
	if err != nil {
		errs = []error{err}
	}
	wantRollback(t, "the first push served again", errs, "older than", rec1.Generation, rec2.Generation)
}
