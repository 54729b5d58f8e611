package cachecmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/remote"
	"github.com/kpreload/kpreload/kmodcache/remote/remotetest"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// pushCell pushes a cell of real modules to reg and returns its set.
func pushCell(t *testing.T, reg *remotetest.Registry, name string) *manifest.Manifest {
	t.Helper()
	src, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	id := remotetest.AddSet(t, src, remotetest.Set{KernelTree: testenv.KernelTree(t, remotetest.Kernel), Driver: name, Version: "1.0", Key: map[string]string{"schema": "test/1", "cell": name}})
	rm, err := remote.Open(reg.URL(), remote.Options{PlainHTTP: true, DockerConfig: filepath.Join(t.TempDir(), "config.json")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rm.PushSet(context.Background(), src, id, name); err != nil {
		t.Fatal(err)
	}
	m, err := src.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// checkPulledCache fails unless the cache verifies, holds no temporary
// file, and holds exactly the sets of the drivers want.
func checkPulledCache(t *testing.T, dir string, want ...string) {
	t.Helper()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if probs, err := st.Verify(context.Background()); err != nil || len(probs) != 0 {
		t.Errorf("verify: %v %v", probs, err)
	}
	ents, err := st.List()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Driver)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("the cache holds sets of %v, want %v", got, want)
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if strings.HasPrefix(d.Name(), ".tmp-") {
			t.Errorf("temporary file left in the cache: %s", p)
		}
		return nil
	})
}

// TestCachePullRefusesSome: a whole-repository pull from a registry holding
// two good cells, a cell with a corrupt blob and a foreign artifact under a
// key-like tag pulls the good ones and exits non-zero, naming each refused
// cell and why.
func TestCachePullRefusesSome(t *testing.T) {
	reg := remotetest.Start(t)
	pushCell(t, reg, "good-a")
	pushCell(t, reg, "good-b")
	// The corrupt cell's own blob (the cells share their module files): its
	// set manifest.
	bad := pushCell(t, reg, "corrupt")
	mb, _, _ := reg.Manifest(manifest.KeyID(bad.CacheKey))
	var am ocispec.Manifest
	if err := json.Unmarshal(mb, &am); err != nil {
		t.Fatal(err)
	}
	d := am.Layers[0].Digest
	if am.Layers[0].MediaType != remote.MediaTypeSet {
		t.Fatalf("layer 0 is a %s, want the set manifest", am.Layers[0].MediaType)
	}
	b := reg.Blob(d)
	b[len(b)/2] ^= 1
	reg.SetBlob(d, b)
	foreign := strings.Repeat("f0", 32)
	cfg := reg.PutBlob([]byte("{}"))
	other, _ := json.Marshal(ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest, ArtifactType: "application/vnd.example.sbom",
		Config: ocispec.Descriptor{MediaType: "application/vnd.example.config", Digest: cfg, Size: 2}})
	reg.PutManifest(foreign, ocispec.MediaTypeImageManifest, other)

	cache := t.TempDir()
	var out, errb bytes.Buffer
	code := cli.Execute([]string{"cache", "pull", "--cache", cache, "--remote", reg.URL(), "--plain-http",
		"--docker-config", filepath.Join(t.TempDir(), "config.json"), "--timeout", "30s", "--idle-timeout", "5s"}, &out, &errb)
	if code == 0 {
		t.Fatalf("pull with refused cells exited 0:\n%s", out.String())
	}
	for _, want := range []string{
		"2 cell(s) pulled, 2 refused:",
		"tag f0f0f0f0f0f0 is a \"application/vnd.example.sbom\" artifact, not a kpreload cell",
		"cell corrupt for " + remotetest.Kernel, "set manifest " + d.String(), "does not match its digest",
	} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
	for _, want := range []string{"good-a 1.0  for " + remotetest.Kernel + ": pulled set", "good-b 1.0  for "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, out.String())
		}
	}
	checkPulledCache(t, cache, "good-a", "good-b")

	// Narrowed to a driver, the foreign tag is only a warning.
	errb.Reset()
	if code := cli.Execute([]string{"cache", "pull", "--cache", t.TempDir(), "--remote", reg.URL(), "--plain-http",
		"--docker-config", filepath.Join(t.TempDir(), "config.json"), "--driver", "good-a"}, &out, &errb); code != 0 || !strings.Contains(errb.String(), "skipped, not a readable cell") {
		t.Errorf("pull --driver good-a = exit %d, stderr %q; want 0 and a warning", code, errb.String())
	}

	// --version reads as the instance YAML's version: "1" is the 1 branch,
	// holding 1.0; "1.0" is that version; "2" holds nothing.
	for _, tt := range []struct {
		version string
		pulled  bool
	}{{"1", true}, {"1.0", true}, {"2", false}} {
		out.Reset()
		errb.Reset()
		code := cli.Execute([]string{"cache", "pull", "--cache", t.TempDir(), "--remote", reg.URL(), "--plain-http",
			"--docker-config", filepath.Join(t.TempDir(), "config.json"), "--driver", "good-a", "--version", tt.version}, &out, &errb)
		if got := code == 0 && strings.Contains(out.String(), "good-a 1.0  for "); got != tt.pulled {
			t.Errorf("pull --driver good-a --version %s = exit %d, stdout %q, stderr %q; want pulled %v", tt.version, code, out.String(), errb.String(), tt.pulled)
		}
	}
}

// TestCachePullSIGTERM: SIGTERM in the middle of a download ends the pull
// through its cleanups: the cache's temporary directory is gone and nothing
// was added.
func TestCachePullSIGTERM(t *testing.T) {
	reg := remotetest.Start(t)
	m := pushCell(t, reg, "slow")
	d := digest.NewDigestFromEncoded(digest.SHA256, m.Modules[1].SHA256)
	cache := t.TempDir()
	reg.HandleBlob(d, remotetest.Stall(reg.Blob(d), 100, func() {
		if ents, _ := filepath.Glob(filepath.Join(cache, ".tmp-pull-*")); len(ents) != 1 {
			t.Errorf("while downloading, the cache holds temporary directories %v, want one", ents)
		}
		// The pull is under way, so its signal.NotifyContext catches this.
		syscall.Kill(syscall.Getpid(), syscall.SIGTERM)
	}))
	var out, errb bytes.Buffer
	code := cli.Execute([]string{"cache", "pull", "--cache", cache, "--remote", reg.URL(), "--plain-http",
		"--docker-config", filepath.Join(t.TempDir(), "config.json")}, &out, &errb)
	if code == 0 || !strings.Contains(errb.String(), "interrupted after 0 of 1 cells") {
		t.Errorf("pull on SIGTERM = exit %d, stderr %q; want non-zero, interrupted", code, errb.String())
	}
	checkPulledCache(t, cache)
}

// TestPullSummary: a pull that refused cells says how many were pulled
// and names each refusal; one that refused none is no error.
func TestPullSummary(t *testing.T) {
	rm, err := remote.Open("oci://127.0.0.1:1/kpreload/cells", remote.Options{PlainHTTP: true, DockerConfig: filepath.Join(t.TempDir(), "config.json")})
	if err != nil {
		t.Fatal(err)
	}
	if err := pullSummary(rm, 3, nil); err != nil {
		t.Errorf("pullSummary(none refused) = %v, want nil", err)
	}
	err = pullSummary(rm, 1, []error{errors.New("cell a: digest"), errors.New("cell b: rollback")})
	if err == nil || !strings.Contains(err.Error(), "1 cell(s) pulled, 2 refused:\n  cell a: digest\n  cell b: rollback") {
		t.Errorf("pullSummary(2 refused) = %v", err)
	}
}

// TestCacheRmHelpExamples runs the example of cache rm exactly as written,
// in a directory whose ./cache holds the test driver's set, version 1.0 and
// 2.0, for the example's kernel (a synthetic module, added with cache add):
// it removes 1.0 and leaves 2.0.
func TestCacheRmHelpExamples(t *testing.T) {
	const kernel = "6.1.0-56-cloud-amd64"
	ko := testenv.SyntheticModule(t, "kpreload_edu", kernel)
	t.Chdir(t.TempDir())
	for _, v := range []string{"1.0", "2.0"} {
		if code, out, errOut := runCLI("cache", "add", "--cache", "./cache", "--driver", "kpreload-edu", "--version", v, ko); code != 0 {
			t.Fatalf("cache add %s: exit %d: %s%s", v, code, out, errOut)
		}
	}
	lines := cli.ExamplesOf(t, "kpreload cache rm")
	for _, l := range lines {
		code, out, errOut := runCLI(strings.Fields(l)[1:]...)
		if code != 0 || strings.Count(out, "removed ") != 1 {
			t.Fatalf("example %q: exit %d, printed %q (want one set removed): %s", l, code, out, errOut)
		}
	}
	code, out, errOut := runCLI("cache", "ls", "--cache", "./cache", "--json")
	var left []store.Entry
	if err := json.Unmarshal([]byte(out), &left); code != 0 || err != nil {
		t.Fatalf("cache ls: exit %d, %v: %s", code, err, errOut)
	}
	if len(left) != 1 || left[0].Version != "2.0" || left[0].Kernel != kernel {
		t.Errorf("after %q the cache holds %+v, want kpreload-edu 2.0 for %s alone", lines, left, kernel)
	}
	if len(lines) != 1 {
		t.Errorf("cache rm examples %q; the test knows one", lines)
	}
}
