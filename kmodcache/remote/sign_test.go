package remote

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kpreload/kpreload/kmodcache/cellsign"
	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/remote/remotetest"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// keys makes a signer and the trust of its public key.
func keys(t *testing.T, name string) (*cellsign.Signer, *cellsign.Trust) {
	t.Helper()
	dir := t.TempDir()
	s, err := cellsign.Generate(filepath.Join(dir, name+".key"), filepath.Join(dir, name+".pub"))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cellsign.LoadTrust(filepath.Join(dir, name+".pub"))
	if err != nil {
		t.Fatal(err)
	}
	return s, tr
}

func emptyStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestSignedCells pushes cells signed by a team's key and pulls them with
// that key trusted, then shows each way a cell is refused: unsigned, signed
// by another key, and a set swapped in under the team's signature by
// someone without the key. Nothing refused enters the cache.
func TestSignedCells(t *testing.T) {
	ctx := context.Background()
	team, teamTrust := keys(t, "team")
	other, otherTrust := keys(t, "other")
	reg := remotetest.Start(t)
	key := map[string]string{"schema": "test", "cell": "signed"}
	src := emptyStore(t)
	id := remotetest.AddSet(t, src, remotetest.Set{KernelTree: testenv.KernelTree(t, remotetest.Kernel), Driver: "virtio", Version: "1", Key: key})

	signer := openAt(t, reg.URL(), Options{Signer: team})
	if _, err := signer.PushSet(ctx, src, id, "r"); err != nil {
		t.Fatal(err)
	}
	puller := openAt(t, reg.URL(), Options{Trust: teamTrust})
	dst := emptyStore(t)
	res, err := puller.Pull(ctx, dst, key, false)
	if err != nil || res.SetID != id {
		t.Fatalf("Pull(signed cell, team trusted) = %+v, %v; want set %s", res, err, id)
	}
	rec, err := puller.Lookup(ctx, key)
	if err != nil || rec.Signer != team.ID {
		t.Errorf("Lookup(signed cell).Signer = %v, %v; want %s", rec, err, team.ID)
	}

	refused := func(name string, key map[string]string, want error, naming string) {
		t.Helper()
		dst := emptyStore(t)
		_, err := puller.Pull(ctx, dst, key, false)
		if !errors.Is(err, ErrUntrusted) || !errors.Is(err, want) || !strings.Contains(err.Error(), naming) {
			t.Errorf("%s: Pull = %v, want ErrUntrusted wrapping %v and naming %s", name, err, want, naming)
		}
		if ents, _ := dst.List(); len(ents) != 0 {
			t.Errorf("%s: the refused pull added %v", name, ents)
		}
		if _, refusedTags, err := puller.List(ctx); err != nil || !containsTag(refusedTags, manifest.KeyID(key)) {
			t.Errorf("%s: List refused %v (%v), want the cell among them", name, refusedTags, err)
		}
	}

	// Unsigned.
	unsignedKey := map[string]string{"schema": "test", "cell": "unsigned"}
	uid := remotetest.AddSet(t, src, remotetest.Set{KernelTree: testenv.KernelTree(t, remotetest.Kernel), Driver: "virtio", Version: "2", Key: unsignedKey})
	if _, err := openAt(t, reg.URL(), Options{}).PushSet(ctx, src, uid, "r"); err != nil {
		t.Fatal(err)
	}
	refused("unsigned", unsignedKey, cellsign.ErrUnsigned, team.ID)

	// Signed by a key nobody trusts.
	foreignKey := map[string]string{"schema": "test", "cell": "foreign"}
	fid := remotetest.AddSet(t, src, remotetest.Set{KernelTree: testenv.KernelTree(t, remotetest.Kernel), Driver: "virtio", Version: "3", Key: foreignKey})
	if _, err := openAt(t, reg.URL(), Options{Signer: other}).PushSet(ctx, src, fid, "r"); err != nil {
		t.Fatal(err)
	}
	refused("foreign key", foreignKey, cellsign.ErrUntrusted, other.ID)

	// Someone without the key replaces the team's cell by another set and
	// copies the team's signature onto it.
	forger := emptyStore(t)
	xid := remotetest.AddSet(t, forger, remotetest.Set{KernelTree: testenv.KernelTree(t, remotetest.Kernel), Driver: "virtio", Version: "1", Flavor: "forged", Key: key})
	signed, _, _ := reg.Manifest(manifest.KeyID(key))
	if _, err := openAt(t, reg.URL(), Options{Trust: otherTrust}).PushSet(ctx, forger, xid, "r"); err != nil {
		t.Fatalf("push over a cell this pusher does not trust: %v", err)
	}
	var orig, forged ocispec.Manifest
	body, mt, _ := reg.Manifest(manifest.KeyID(key))
	if err := json.Unmarshal(signed, &orig); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(body, &forged); err != nil {
		t.Fatal(err)
	}
	if forged.Annotations[AnnotationSetID] != xid {
		t.Fatalf("the forger's push did not replace the cell: set %s", forged.Annotations[AnnotationSetID])
	}
	forged.Annotations[AnnotationSigner] = orig.Annotations[AnnotationSigner]
	forged.Annotations[AnnotationSignature] = orig.Annotations[AnnotationSignature]
	b, _ := json.Marshal(forged)
	reg.PutManifest(manifest.KeyID(key), mt, b)
	refused("the team's signature without its statement", key, cellsign.ErrOldFormat, team.ID)
	forged.Annotations[AnnotationStatement] = orig.Annotations[AnnotationStatement]
	b, _ = json.Marshal(forged)
	reg.PutManifest(manifest.KeyID(key), mt, b)
	refused("a set swapped under the team's signed statement", key, cellsign.ErrBadSignature, team.ID)

	// The team's builder pushes again: the untrusted cell is replaced.
	if _, err := signer.PushSet(ctx, src, id, "r"); err != nil {
		t.Fatal(err)
	}
	if res, err := puller.Pull(ctx, emptyStore(t), key, false); err != nil || res.SetID != id {
		t.Errorf("Pull after the team's push = %+v, %v; want set %s", res, err, id)
	}
}

func containsTag(refused []*Refusal, tag string) bool {
	for _, r := range refused {
		if r.Tag == tag {
			return true
		}
	}
	return false
}

// TestPullKeepsLocalSet pulls a cell for a kernel, driver, version and
// flavour the local cache already holds a set of (built here from other
// inputs): refused without replace, the local set kept; taken with it.
func TestPullKeepsLocalSet(t *testing.T) {
	ctx := context.Background()
	reg := remotetest.Start(t)
	src := emptyStore(t)
	key := map[string]string{"schema": "test", "cell": "remote"}
	id := remotetest.AddSet(t, src, remotetest.Set{KernelTree: testenv.KernelTree(t, remotetest.Kernel), Driver: "virtio", Version: "1", Key: key})
	r := openAt(t, reg.URL(), Options{})
	if _, err := r.PushSet(ctx, src, id, "r"); err != nil {
		t.Fatal(err)
	}
	local := emptyStore(t)
	lid := remotetest.AddSet(t, local, remotetest.Set{KernelTree: testenv.KernelTree(t, remotetest.Kernel), Driver: "virtio", Version: "1", Key: map[string]string{"schema": "test", "cell": "local"}})
	if _, err := r.Pull(ctx, local, key, false); err == nil || !strings.Contains(err.Error(), "--replace") {
		t.Errorf("Pull over a local set without replace = %v, want a refusal naming --replace", err)
	}
	if ents, _ := local.List(); len(ents) != 1 || ents[0].ID != lid {
		t.Errorf("after the refused pull the cache holds %v, want the local set %s", ents, lid)
	}
	if res, err := r.Pull(ctx, local, key, true); err != nil || res.SetID != id {
		t.Errorf("Pull with replace = %+v, %v; want set %s", res, err, id)
	}
}
