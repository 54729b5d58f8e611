package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kpreload/kpreload/kmodcache/cellsign"
	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/remote"
	"github.com/kpreload/kpreload/kmodcache/remote/remotetest"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// pushSignedCell pushes a set of driver virtio, version, built from the
// key {"cell": cell} as recipe's cell, signed by s (unsigned when nil), and
// returns its tag and set id.
func pushSignedCell(t *testing.T, reg *remotetest.Registry, s *cellsign.Signer, cell, recipe, version string) (tag, id string) {
	t.Helper()
	src, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	key := map[string]string{"schema": "test/1", "cell": cell}
	id = remotetest.AddSet(t, src, remotetest.Set{KernelTree: testenv.KernelTree(t, remotetest.Kernel), Driver: "virtio", Version: version, Key: key})
	rm, err := remote.Open(reg.URL(), remote.Options{PlainHTTP: true, DockerConfig: filepath.Join(t.TempDir(), "config.json"), Signer: s})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rm.PushSet(context.Background(), src, id, recipe); err != nil {
		t.Fatal(err)
	}
	return manifest.KeyID(key), id
}

// rewriteAnnotations edits the annotations of the manifest tagged tag,
// keeping its signature, as anyone who can push to the registry may.
func rewriteAnnotations(t *testing.T, reg *remotetest.Registry, tag string, edit func(map[string]string)) {
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

// TestCachePullTrustIgnoresForgedAnnotations: of two cells of one driver,
// version and kernel signed by the team, the registry makes the older one
// look newer and sort first by rewriting its recipe and creation
// annotations. cache pull --trust takes the newer signed cell (and only
// it), and build --report --trust shows the signed recipe, not the forged
// name.
func TestCachePullTrustIgnoresForgedAnnotations(t *testing.T) {
	dir := t.TempDir()
	team, err := cellsign.Generate(filepath.Join(dir, "team.key"), filepath.Join(dir, "team.pub"))
	if err != nil {
		t.Fatal(err)
	}
	reg := remotetest.Start(t)
	older, _ := pushSignedCell(t, reg, team, "older", "virtio", "1")
	_, newerID := pushSignedCell(t, reg, team, "newer", "virtio", "1")
	rewriteAnnotations(t, reg, older, func(a map[string]string) {
		a[remote.AnnotationRecipe] = "a-forged"
		a[ocispec.AnnotationCreated] = "2099-01-01T00:00:00Z"
	})
	flags := []string{"--remote", reg.URL(), "--plain-http", "--docker-config", filepath.Join(dir, "none.json"), "--trust", filepath.Join(dir, "team.pub")}

	cache := t.TempDir()
	var out, errb bytes.Buffer
	if code := Execute(append([]string{"cache", "pull", "--cache", cache}, flags...), &out, &errb); code != 0 {
		t.Fatalf("cache pull --trust = exit %d: %s%s", code, out.String(), errb.String())
	}
	st, err := store.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	if ents, _ := st.List(); len(ents) != 1 || ents[0].ID != newerID {
		t.Errorf("cache pull --trust took %v, want the newer signed set %.12s alone", ents, newerID)
	}

	for _, asJSON := range []bool{false, true} {
		out.Reset()
		errb.Reset()
		args := append([]string{"build", "--report", "--cache", t.TempDir()}, flags...)
		if asJSON {
			args = append(args, "--json")
		}
		if code := Execute(args, &out, &errb); code != 0 {
			t.Fatalf("build --report --trust = exit %d: %s", code, errb.String())
		}
		if strings.Contains(out.String(), "a-forged") || !strings.Contains(out.String(), "virtio") {
			t.Errorf("build --report --trust (json %v) shows the forged name or not the signed one:\n%s", asJSON, out.String())
		}
	}
}

// TestUnsignedIsNeverSilent: cache pull without --trust says of each cell
// it takes that it is unsigned (or its signature unchecked), on stderr and
// in --json; build --report marks the rows.
func TestUnsignedIsNeverSilent(t *testing.T) {
	dir := t.TempDir()
	team, err := cellsign.Generate(filepath.Join(dir, "team.key"), filepath.Join(dir, "team.pub"))
	if err != nil {
		t.Fatal(err)
	}
	reg := remotetest.Start(t)
	unsigned, _ := pushSignedCell(t, reg, nil, "unsigned", "virtio", "1")
	signed, _ := pushSignedCell(t, reg, team, "signed", "other", "2")
	flags := []string{"--remote", reg.URL(), "--plain-http", "--docker-config", filepath.Join(dir, "none.json")}
	var out, errb bytes.Buffer
	if code := Execute(append([]string{"cache", "pull", "--cache", t.TempDir(), "--json"}, flags...), &out, &errb); code != 0 {
		t.Fatalf("cache pull = exit %d: %s", code, errb.String())
	}
	for _, want := range []string{
		fmt.Sprintf("(key %.12s): unsigned: taken without --trust", unsigned),
		fmt.Sprintf("(key %.12s): signed by %s, not verified: taken without --trust", signed, team.ID),
	} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("cache pull without --trust: stderr %q does not say %q", errb.String(), want)
		}
	}
	var pulled []map[string]any
	if err := json.Unmarshal(out.Bytes(), &pulled); err != nil || len(pulled) != 2 {
		t.Fatalf("cache pull --json = %s (%v), want two cells", out.String(), err)
	}
	for _, p := range pulled {
		want := map[string]string{unsigned: "unsigned", signed: "unverified"}[p["tag"].(string)]
		if p["trust"] != want {
			t.Errorf("cache pull --json: cell %v has trust %v, want %q", p["tag"], p["trust"], want)
		}
	}
	out.Reset()
	errb.Reset()
	if code := Execute(append([]string{"build", "--report", "--cache", t.TempDir()}, flags...), &out, &errb); code != 0 {
		t.Fatalf("build --report = exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "ok, unsigned") || !strings.Contains(out.String(), "ok, unverified") || !strings.Contains(out.String(), "no --trust") {
		t.Errorf("build --report without --trust does not mark the rows:\n%s", out.String())
	}
}
