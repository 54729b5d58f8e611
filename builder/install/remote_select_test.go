package install

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/cellsign"
	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/remote"
	"github.com/kpreload/kpreload/kmodcache/remote/remotetest"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestHookPullsNewestSignedCell: the registry holds two signed cells of the
// driver a root carries, for the kernel being added, and rewrites the
// older one's recipe and creation annotations so that it sorts first and
// looks newer. The kernel hook's pull takes the newer signed cell. When
// the registry then hides it, the hook warns, naming both generations, and
// pulls nothing of that driver rather than the older cell.
// signedRegistry starts a loopback registry and opens it for pushes signed
// by a new key NAME.key, whose NAME.pub lies beside it in keys.
func signedRegistry(t *testing.T, name string) (keys string, signer *cellsign.Signer, reg *remotetest.Registry, rm *remote.Remote) {
	t.Helper()
	keys = t.TempDir()
	signer, err := cellsign.Generate(filepath.Join(keys, name+".key"), filepath.Join(keys, name+".pub"))
	if err != nil {
		t.Fatal(err)
	}
	reg = remotetest.Start(t)
	rm, err = remote.Open(reg.URL(), remote.Options{PlainHTTP: true, DockerConfig: filepath.Join(t.TempDir(), "none.json"), Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	return keys, signer, reg, rm
}

func TestHookPullsNewestSignedCell(t *testing.T) {
	ctx := context.Background()
	keys, _, reg, rm := signedRegistry(t, "team")
	var tags, ids []string
	kernel := ""
	for _, cell := range []string{"older", "newer"} {
		src, err := store.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		key := map[string]string{"schema": "test", "cell": cell}
		id := remotetest.AddSet(t, src, remotetest.Set{KernelTree: testenv.KernelTree(t, remotetest.Kernel), Driver: "virtio", Version: "1", Key: key})
		res, err := rm.PushSet(ctx, src, id, "virtio")
		if err != nil {
			t.Fatal(err)
		}
		kernel = res.Record.Kernel
		tags, ids = append(tags, manifest.KeyID(key)), append(ids, id)
	}
	b, mt, _ := reg.Manifest(tags[0])
	var m ocispec.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m.Annotations[remote.AnnotationRecipe] = "a-forged"
	m.Annotations[ocispec.AnnotationCreated] = "2099-01-01T00:00:00Z"
	b, _ = json.Marshal(m)
	reg.PutManifest(tags[0], mt, b)

	root := t.TempDir()
	cache := filepath.Join(root, CacheDir)
	if err := os.MkdirAll(filepath.Join(cache, bootindex.IndexDir), 0o755); err != nil {
		t.Fatal(err)
	}
	const other = "6.12.0-1-other"
	ix := &bootindex.Index{Format: bootindex.FormatVersion, Kernel: other, Sets: []bootindex.Set{{ID: strings.Repeat("a", 64), Driver: "virtio", Version: "1"}}}
	if err := bootindex.Write(bootindex.Path(cache, other), ix); err != nil {
		t.Fatal(err)
	}
	pub, _ := os.ReadFile(filepath.Join(keys, "team.pub"))
	if err := os.MkdirAll(filepath.Join(root, "etc/kpreload/keys"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/kpreload/keys/team.pub"), pub, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseRemoteConfig([]byte("remote: " + reg.URL() + "\nplain_http: true\ntrust: [/etc/kpreload/keys/team.pub]\n"))
	if err != nil {
		t.Fatal(err)
	}
	o := &Options{Root: root, RootFS: testRootFS(), Log: io.Discard}
	pulled, warnings := o.pullCells(ctx, cfg, kernel)
	if len(pulled) != 1 || !strings.Contains(pulled[0], fmt.Sprintf("set %.12s", ids[1])) || len(warnings) != 0 {
		t.Fatalf("pullCells = %q, warnings %q; want the newer signed cell (set %.12s) alone", pulled, warnings, ids[1])
	}

	// The registry hides the newer cell; the older one is all it offers.
	reg.HandleManifest(tags[1], func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}`)
	})
	reg.HandleTags(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"name": remotetest.Repo, "tags": slices.DeleteFunc(reg.Tags(), func(s string) bool { return s == tags[1] })})
	})
	st, err := store.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Remove(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	if err := bootindex.Write(bootindex.Path(cache, other), ix); err != nil { // the store's rewrite drops it
		t.Fatal(err)
	}
	pulled, warnings = o.pullCells(ctx, cfg, kernel)
	all := strings.Join(warnings, "\n")
	if len(pulled) != 0 || !strings.Contains(all, "rollback refused") || strings.Count(all, "generation ") < 2 {
		t.Errorf("pullCells with the newest hidden = %q, warnings %q; want nothing pulled and a rollback warning naming both generations", pulled, warnings)
	}
}
