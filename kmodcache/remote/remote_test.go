package remote

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

const k61 = "6.1.0-56-cloud-amd64"

// addRealSet adds real modules of the 6.1 kernel to a fresh cache as a set
// built from key.
func addRealSet(t *testing.T, key map[string]string) (*store.Store, string) {
	t.Helper()
	tree := filepath.Join(testenv.KernelTree(t, k61), "lib", "modules", k61)
	var files []string
	for _, m := range []string{"kernel/drivers/net/virtio_net", "kernel/drivers/net/net_failover", "kernel/net/core/failover"} {
		files = append(files, filepath.Join(tree, m+".ko"))
	}
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	gpus := filepath.Join(t.TempDir(), "supported-gpus.json")
	if err := os.WriteFile(gpus, []byte(`{"chips":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, id, err := st.AddFiles(context.Background(), store.AddRequest{
		Driver: "virtio-test", Version: "1.0", Flavor: "open", Files: files, CacheKey: key, SupportedGPUs: gpus,
	})
	if err != nil {
		t.Fatal(err)
	}
	return st, id
}

func openRemote(t *testing.T, reg *testenv.Registry) *Remote {
	t.Helper()
	r, err := Open("oci://"+reg.Addr+"/kpreload/cells", Options{PlainHTTP: true, DockerConfig: filepath.Join(t.TempDir(), "config.json")})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestParse(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"oci://registry.example.com/kpreload/cells", "registry.example.com/kpreload/cells", ""},
		{"oci://127.0.0.1:5000/cells", "127.0.0.1:5000/cells", ""},
		{"registry.example.com/cells", "", "want oci://"},
		{"oci://registry.example.com", "", "want oci://"},
		{"oci://registry.example.com/cells:latest", "", "may not carry a tag"},
		{"oci://user@registry.example.com/cells", "", "no user"},
	} {
		got, err := Parse(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Parse(%q) error = %v, want one containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestPushPullRoundTrip(t *testing.T) {
	ctx := context.Background()
	reg := testenv.StartRegistry(t)
	r := openRemote(t, reg)
	key := map[string]string{"schema": "test/1", "driver": "virtio-test", "kernel": k61}
	src, id := addRealSet(t, key)

	if _, err := r.Lookup(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Lookup before push: err = %v, want ErrNotFound", err)
	}
	res, err := r.PushSet(ctx, src, id, "virtio-recipe")
	if err != nil {
		t.Fatal(err)
	}
	if !res.Pushed || res.Blobs != 7 {
		t.Errorf("first push: pushed %v, %d blobs; want true, 7 (set, 3 modules, gpus, key, manifest)", res.Pushed, res.Blobs)
	}
	again, err := r.PushSet(ctx, src, id, "virtio-recipe")
	if err != nil {
		t.Fatal(err)
	}
	if again.Pushed || again.Blobs != 0 {
		t.Errorf("second push: pushed %v, %d blobs; want nothing pushed", again.Pushed, again.Blobs)
	}
	rec := again.Record
	if got, want := [...]string{rec.State, rec.Recipe, rec.Kernel, rec.Driver, rec.Version, rec.Flavor, rec.SetID, rec.Tag},
		[...]string{StateOK, "virtio-recipe", k61, "virtio-test", "1.0", "open", id, manifest.KeyID(key)}; got != want {
		t.Errorf("record = %v, want %v", got, want)
	}

	dst, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := r.Pull(ctx, dst, key, false)
	if err != nil {
		t.Fatal(err)
	}
	if pulled.SetID != id {
		t.Errorf("pulled set id %s, want %s (the same bytes)", pulled.SetID, id)
	}
	if got, ok, err := dst.Lookup(key); err != nil || !ok || got != id {
		t.Errorf("local Lookup after pull = %s, %v, %v; want %s", got, ok, err, id)
	}
	if probs, err := dst.Verify(ctx); err != nil || len(probs) != 0 {
		t.Errorf("verify after pull: %v %v", probs, err)
	}
	recs, refused, err := r.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Tag != manifest.KeyID(key) || len(refused) != 0 {
		t.Errorf("List = %+v, refused %v; want the one cell", recs, refused)
	}
}

func TestPullRefusesCorruptBlob(t *testing.T) {
	ctx := context.Background()
	reg := testenv.StartRegistry(t)
	r := openRemote(t, reg)
	key := map[string]string{"schema": "test/1", "case": "corrupt"}
	src, id := addRealSet(t, key)
	if _, err := r.PushSet(ctx, src, id, "virtio-recipe"); err != nil {
		t.Fatal(err)
	}
	m, err := src.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		damage func(path string) error
	}{
		{"flipped byte", func(p string) error {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b[len(b)/2] ^= 0x01
			return os.WriteFile(p, b, 0o644)
		}},
		{"truncated", func(p string) error { return os.Truncate(p, 1000) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mod := m.Modules[0]
			blob := reg.BlobPath(mod.SHA256)
			orig, err := os.ReadFile(blob)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.WriteFile(blob, orig, 0o644) })
			if err := tc.damage(blob); err != nil {
				t.Fatal(err)
			}
			dst, err := store.Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			_, err = r.Pull(ctx, dst, key, false)
			if err == nil {
				t.Fatal("pull of a damaged blob succeeded")
			}
			for _, want := range []string{"cell virtio-recipe for " + k61, mod.File, "sha256:" + mod.SHA256} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
			entries, lerr := dst.List()
			if lerr != nil || len(entries) != 0 {
				t.Errorf("local cache after a refused pull holds %v (%v), want nothing", entries, lerr)
			}
			objs, _ := filepath.Glob(filepath.Join(dst.Dir(), "objects", "sha256", "*", "*"))
			if len(objs) != 0 {
				t.Errorf("local cache after a refused pull holds objects %v", objs)
			}
		})
	}
}

func TestFailureRecords(t *testing.T) {
	ctx := context.Background()
	reg := testenv.StartRegistry(t)
	r := openRemote(t, reg)
	key := map[string]string{"schema": "test/1", "case": "failure"}
	log := filepath.Join(t.TempDir(), "make.log")
	if err := os.WriteFile(log, []byte("cc ...\nnv-pci.c:223:9: error: too few arguments\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := Failure{Key: key, Recipe: "nvidia-535-open", Kernel: "6.12.117+deb12-cloud-amd64", Driver: "nvidia", Version: "535.261.03", Flavor: "open",
		FirstError: "nv-pci.c:223:9: error: too few arguments\n", LogPath: log}
	res, err := r.PushFailure(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Pushed || res.Record.State != StateFailed || res.Record.FirstError != "nv-pci.c:223:9: error: too few arguments" {
		t.Errorf("failure record = %+v", res.Record)
	}
	dst, _ := store.Open(t.TempDir())
	if _, err := r.Pull(ctx, dst, key, false); !errors.Is(err, ErrFailedCell) || !strings.Contains(err.Error(), "too few arguments") {
		t.Errorf("pull of a failed cell: %v, want ErrFailedCell with the first error", err)
	}
	// A later successful build with the same key replaces the failure record;
	// a failure never replaces a built cell.
	src, id := addRealSet(t, key)
	if res, err := r.PushSet(ctx, src, id, "nvidia-535-open"); err != nil || !res.Pushed || res.Record.State != StateOK {
		t.Fatalf("push over a failure record: %+v, %v", res, err)
	}
	if res, err := r.PushFailure(ctx, f); err != nil || res.Pushed || res.Record.State != StateOK {
		t.Errorf("failure over a built cell: %+v, %v; want the built record kept", res, err)
	}
}

func TestConcurrentPushesOfOneCell(t *testing.T) {
	ctx := context.Background()
	reg := testenv.StartRegistry(t)
	key := map[string]string{"schema": "test/1", "case": "race"}
	src, id := addRealSet(t, key)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = openRemote(t, reg).PushSet(ctx, src, id, "race")
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("pusher %d: %v", i, err)
		}
	}
	r := openRemote(t, reg)
	recs, refused, err := r.List(ctx)
	if err != nil || len(recs) != 1 || len(refused) != 0 {
		t.Fatalf("List after racing pushes = %v, refused %v, %v; want one cell", recs, refused, err)
	}
	dst, _ := store.Open(t.TempDir())
	if res, err := r.Pull(ctx, dst, key, false); err != nil || res.SetID != id {
		t.Errorf("pull after racing pushes: %+v, %v", res, err)
	}
}

// TestOpenWithoutHome: a system service or a kernel hook has no $HOME and no
// $DOCKER_CONFIG, so its command names no Docker config; the remote still
// opens, asking the registry anonymously.
func TestOpenWithoutHome(t *testing.T) {
	if _, err := Open("oci://127.0.0.1:5000/cells", Options{PlainHTTP: true, DockerConfig: DockerConfigPath("", "")}); err != nil {
		t.Errorf("Open without a home: %v", err)
	}
}

// TestDockerConfigPath: the standard place of the Docker config file, as
// Docker and oras-go find it from $DOCKER_CONFIG and $HOME.
func TestDockerConfigPath(t *testing.T) {
	tests := []struct{ dockerConfig, home, want string }{
		{"/etc/docker-auth", "/root", "/etc/docker-auth/config.json"},
		{"", "/home/builder", "/home/builder/.docker/config.json"},
		{"", "", ""},
	}
	for _, tt := range tests {
		if got := DockerConfigPath(tt.dockerConfig, tt.home); got != tt.want {
			t.Errorf("DockerConfigPath(%q, %q) = %q, want %q", tt.dockerConfig, tt.home, got, tt.want)
		}
	}
}

// TestStallBeforeManifest: with the knob on, a push stops after its blobs
// and before its manifest until its context ends, so the registry holds no
// record of the cell.
func TestStallBeforeManifest(t *testing.T) {
	reg := testenv.StartRegistry(t)
	r, err := Open("oci://"+reg.Addr+"/kpreload/cells", Options{PlainHTTP: true, StallBeforeManifest: true})
	if err != nil {
		t.Fatal(err)
	}
	key := map[string]string{"schema": "test/1", "case": "stall"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := r.PushFailure(ctx, Failure{Key: key, Recipe: "r", Kernel: k61, Driver: "d", Version: "1", Flavor: "open", FirstError: "e"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PushFailure with StallBeforeManifest = %v, want the context's end", err)
	}
	if _, err := openRemote(t, reg).Lookup(context.Background(), key); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup after a stalled push: %v, want ErrNotFound (no manifest)", err)
	}
}
