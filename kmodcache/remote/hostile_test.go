package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/errdef"

	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/remote/remotetest"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// hostileTimeouts are short timeouts that keep the hostile tests fast.
var hostileTimeouts = Timeouts{Connect: time.Second, FirstByte: 500 * time.Millisecond, Idle: 300 * time.Millisecond, Total: 5 * time.Second}

// hostile is a test against a hostile registry: $TMPDIR is private to it, so
// that anything a pull leaves in os.TempDir() shows.
type hostile struct {
	t   *testing.T
	reg *remotetest.Registry
	tmp string
}

func newHostile(t *testing.T) *hostile {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	return &hostile{t: t, reg: remotetest.Start(t), tmp: tmp}
}

// open opens the registry with o (hostileTimeouts when o has none).
func (h *hostile) open(o Options) *Remote {
	h.t.Helper()
	return openAt(h.t, h.reg.URL(), o)
}

func openAt(t *testing.T, url string, o Options) *Remote {
	t.Helper()
	o.PlainHTTP = true
	o.DockerConfig = filepath.Join(t.TempDir(), "config.json")
	if o.Timeouts == (Timeouts{}) {
		o.Timeouts = hostileTimeouts
	}
	r, err := Open(url, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// cell is a cell pushed to the hostile registry.
type cell struct {
	key  map[string]string
	id   string
	mods []*manifest.Module
}

// push adds a set of real modules to a fresh cache and pushes it as
// recipe's cell.
func (h *hostile) push(recipe string) *cell {
	h.t.Helper()
	src, err := store.Open(h.t.TempDir())
	if err != nil {
		h.t.Fatal(err)
	}
	key := map[string]string{"schema": "test/1", "recipe": recipe}
	id := remotetest.AddSet(h.t, src, remotetest.Set{KernelTree: testenv.KernelTree(h.t, remotetest.Kernel), Driver: "test-" + recipe, Version: "1.0", Flavor: "open", Key: key, GPUs: []byte(`{"chips":[]}`)})
	res, err := h.open(Options{}).PushSet(context.Background(), src, id, recipe)
	if err != nil {
		h.t.Fatal(err)
	}
	m, err := src.Get(id)
	if err != nil {
		h.t.Fatal(err)
	}
	if res.Record.SetID != id {
		h.t.Fatalf("pushed record names set %s, want %s", res.Record.SetID, id)
	}
	c := &cell{key: key, id: id}
	for i := range m.Modules {
		c.mods = append(c.mods, &m.Modules[i])
	}
	return c
}

// tmpFiles lists what is in $TMPDIR (where t.TempDir makes directories
// too), but for the cache directory skip.
func (h *hostile) tmpFiles(skip string) []string {
	var out []string
	filepath.WalkDir(h.tmp, func(p string, d fs.DirEntry, err error) error {
		if p == skip {
			return fs.SkipDir
		}
		if p != h.tmp {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// pull pulls c into a fresh cache (dst, if not nil) and checks what every
// pull must leave: nothing new in $TMPDIR, no temporary file in the cache,
// a cache that verifies, holding c's set when the pull succeeded and
// nothing otherwise.
func (h *hostile) pull(ctx context.Context, r *Remote, dst *store.Store, c *cell) (*PullResult, error) {
	h.t.Helper()
	if dst == nil {
		var err error
		if dst, err = store.Open(h.t.TempDir()); err != nil {
			h.t.Fatal(err)
		}
	}
	before := h.tmpFiles(dst.Dir())
	before0, err := dst.List()
	if err != nil {
		h.t.Fatal(err)
	}
	res, perr := r.Pull(ctx, dst, c.key, false)
	if after := h.tmpFiles(dst.Dir()); !slices.Equal(before, after) {
		h.t.Errorf("the pull left files in $TMPDIR: %v, was %v", after, before)
	}
	checkCache(h.t, dst)
	ents, err := dst.List()
	if err != nil {
		h.t.Fatal(err)
	}
	switch {
	case perr == nil && !slices.ContainsFunc(ents, func(e store.Entry) bool { return e.ID == c.id }):
		h.t.Errorf("the pull succeeded but the cache lacks set %s: %v", c.id, ents)
	case perr != nil && len(ents) != len(before0):
		h.t.Errorf("a refused pull changed the cache's sets: %v, was %v", ents, before0)
	}
	return res, perr
}

// checkCache fails when dst does not verify or holds a temporary file.
func checkCache(t *testing.T, st *store.Store) {
	t.Helper()
	if probs, err := st.Verify(context.Background()); err != nil || len(probs) != 0 {
		t.Errorf("verify: %v %v", probs, err)
	}
	filepath.WalkDir(st.Dir(), func(p string, d fs.DirEntry, err error) error {
		if strings.HasPrefix(d.Name(), ".tmp-") {
			t.Errorf("temporary file left in the cache: %s", p)
		}
		return nil
	})
}

func wantErr(t *testing.T, err error, wants ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want one naming %q", wants)
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

func TestHostileBlobs(t *testing.T) {
	h := newHostile(t)
	c := h.push("blobs")
	mod := c.mods[0]
	d := digest.NewDigestFromEncoded(digest.SHA256, mod.SHA256)
	good := h.reg.Blob(d)
	longer := append(slices.Clone(good), "trailing garbage"...)
	flipped := slices.Clone(good)
	flipped[100] ^= 1
	// Another origin (another port) for redirects.
	hops := atomic.Int32{}
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		hops.Add(1)
		switch {
		case req.URL.Path == "/blob":
			remotetest.Body(good, true)(w, req)
		case req.URL.Path == "/loop/a":
			http.Redirect(w, req, "/loop/b", http.StatusFound)
		case req.URL.Path == "/loop/b":
			http.Redirect(w, req, "/loop/a", http.StatusFound)
		case strings.HasPrefix(req.URL.Path, "/hop/"):
			n, _ := strconv.Atoi(strings.TrimPrefix(req.URL.Path, "/hop/"))
			http.Redirect(w, req, fmt.Sprintf("/hop/%d", n+1), http.StatusFound)
		}
	}))
	defer other.Close()
	tlsServer := httptest.NewTLSServer(remotetest.Body(good, true))
	defer tlsServer.Close()
	cellName := "cell blobs for " + remotetest.Kernel
	for _, tc := range []struct {
		name     string
		handler  http.HandlerFunc
		timeouts Timeouts
		// ok: the pull succeeds; else its error says wants (besides the
		// cell, the module file and the blob's digest) and wraps is.
		ok     bool
		wants  []string
		is     error
		maxDur time.Duration
	}{
		{name: "served as is", handler: remotetest.Body(good, true), ok: true},
		{name: "served chunked", handler: remotetest.Body(good, false), ok: true},
		{name: "longer than declared, Content-Length says so", handler: remotetest.Body(longer, true), wants: []string{"mismatch Content-Length"}},
		{name: "longer than declared, no Content-Length", handler: remotetest.Body(longer, false), wants: []string{fmt.Sprintf("more than the %d bytes its descriptor declares", len(good))}},
		{name: "shorter than declared, Content-Length says so", handler: remotetest.Body(good[:1000], true), wants: []string{"mismatch Content-Length"}},
		{name: "shorter than declared, no Content-Length", handler: remotetest.Body(good[:1000], false), wants: []string{fmt.Sprintf("sent 1000 bytes, fewer than the %d", len(good))}},
		{name: "endless, no Content-Length", handler: remotetest.Endless(), wants: []string{fmt.Sprintf("more than the %d bytes", len(good))}},
		{name: "other bytes", handler: remotetest.Body(flipped, true), wants: []string{"does not match its digest"}},
		{name: "stalls midway", handler: remotetest.Stall(good, 1000, nil), wants: []string{"sent nothing for 300ms (idle timeout)"}, is: ErrTimeout},
		{name: "trickles past the total timeout", handler: remotetest.Trickle(good, 10*time.Millisecond),
			timeouts: Timeouts{Connect: time.Second, FirstByte: time.Second, Idle: time.Second, Total: 700 * time.Millisecond},
			wants:    []string{"total timeout, 700ms"}, is: ErrTimeout},
		{name: "redirect to another port", handler: remotetest.Redirect(other.URL + "/blob"), ok: true},
		{name: "redirect loop", handler: remotetest.Redirect(other.URL + "/loop/a"), wants: []string{"redirect loop", "/loop/a"}, is: errRedirect},
		{name: "endless redirects", handler: remotetest.Redirect(other.URL + "/hop/0"), wants: []string{"more than 5 redirects"}, is: errRedirect},
		{name: "redirect to https", handler: remotetest.Redirect(tlsServer.URL + "/blob"), wants: []string{"another scheme"}, is: errRedirect},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.t = t
			defer func() { h.t = t }()
			h.reg.HandleBlob(d, tc.handler)
			defer h.reg.HandleBlob(d, nil)
			hops.Store(0)
			r := h.open(Options{Timeouts: tc.timeouts})
			start := time.Now()
			res, err := h.pull(context.Background(), r, nil, c)
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("the pull took %s", took)
			}
			if tc.ok {
				if err != nil || res.SetID != c.id {
					t.Fatalf("pull = %+v, %v; want set %s", res, err, c.id)
				}
				return
			}
			wantErr(t, err, append([]string{cellName, mod.File, d.String()}, tc.wants...)...)
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %q does not wrap %v", err, tc.is)
			}
			if n := hops.Load(); n > DefaultMaxRedirects+1 {
				t.Errorf("%d requests to the redirecting server, want at most %d", n, DefaultMaxRedirects+1)
			}
		})
	}
	h.t = t
}

// TestHostileManifests alters the artifact manifest of a cell: what the
// registry says about sizes and layers is checked before anything is
// downloaded.
func TestHostileManifests(t *testing.T) {
	h := newHostile(t)
	c := h.push("manifests")
	tag := manifest.KeyID(c.key)
	orig, mt, _ := h.reg.Manifest(tag)
	mod := c.mods[0]
	for _, tc := range []struct {
		name  string
		edit  func(m *ocispec.Manifest)
		wants []string
	}{
		{"module layer larger than the set says", func(m *ocispec.Manifest) {
			for i, l := range m.Layers {
				if l.Digest.Encoded() == mod.SHA256 {
					m.Layers[i].Size = 1 << 30
				}
			}
		}, []string{"layer " + mod.File, fmt.Sprintf("is 1073741824 bytes, the set manifest says %d", mod.Size)}},
		{"module layer missing", func(m *ocispec.Manifest) {
			m.Layers = slices.DeleteFunc(m.Layers, func(l ocispec.Descriptor) bool { return l.Digest.Encoded() == mod.SHA256 })
		}, []string{"lacks layer sha256:" + mod.SHA256}},
		{"two set layers", func(m *ocispec.Manifest) { m.Layers = append(m.Layers, m.Layers[0]) }, []string{"2 set manifest layers"}},
		{"negative size", func(m *ocispec.Manifest) { m.Layers[1].Size = -1 }, []string{"size -1 outside"}},
		{"set id of another set", func(m *ocispec.Manifest) { m.Annotations[AnnotationSetID] = strings.Repeat("ab", 32) }, []string{"the record names set abababababab"}},
		{"record for another kernel", func(m *ocispec.Manifest) { m.Annotations[AnnotationKernel] = "6.12.0-1-amd64" }, []string{"the record says", "for 6.12.0-1-amd64"}},
		{"escape in a name", func(m *ocispec.Manifest) { m.Annotations[AnnotationDriver] = "evil\x1b[2J" }, []string{"driver annotation", `holds '\x1b'`}},
		{"config not a key", func(m *ocispec.Manifest) { m.Config.MediaType = "application/octet-stream" }, []string{"want the cell's key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.t = t
			var m ocispec.Manifest
			if err := json.Unmarshal(orig, &m); err != nil {
				t.Fatal(err)
			}
			tc.edit(&m)
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			h.reg.PutManifest(tag, mt, b)
			defer h.reg.PutManifest(tag, mt, orig)
			before := h.reg.BlobFetches(digest.NewDigestFromEncoded(digest.SHA256, mod.SHA256))
			_, err = h.pull(context.Background(), h.open(Options{}), nil, c)
			wantErr(t, err, append([]string{short(tag)}, tc.wants...)...)
			if n := h.reg.BlobFetches(digest.NewDigestFromEncoded(digest.SHA256, mod.SHA256)) - before; n != 0 {
				t.Errorf("the module blob was fetched %d times, want 0 (refused before downloading)", n)
			}
		})
	}
	h.t = t
}

// TestHostileSilentServer: a registry that accepts connections and never
// answers costs the first-byte timeout, once (a timeout is not retried).
func TestHostileSilentServer(t *testing.T) {
	addr := remotetest.Silent(t)
	r := openAt(t, "oci://"+addr+"/kpreload/cells", Options{})
	key := map[string]string{"schema": "test/1"}
	dst, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		op   func() error
	}{
		{"Lookup", func() error { _, err := r.Lookup(context.Background(), key); return err }},
		{"List", func() error { _, _, err := r.List(context.Background()); return err }},
		{"Pull", func() error { _, err := r.Pull(context.Background(), dst, key, false); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			err := tc.op()
			took := time.Since(start)
			wantErr(t, err, addr, "first-byte timeout 500ms", "timeout awaiting response headers")
			if !errors.Is(err, ErrTimeout) {
				t.Errorf("error %q does not wrap ErrTimeout", err)
			}
			if took > 2*time.Second {
				t.Errorf("%s took %s, want about the first-byte timeout (500ms)", tc.name, took)
			}
		})
	}
	checkCache(t, dst)
}

func TestHostileTagPages(t *testing.T) {
	h := newHostile(t)
	c := h.push("pages")
	tag := manifest.KeyID(c.key)
	var requests atomic.Int32
	for _, tc := range []struct {
		name         string
		page         func(w http.ResponseWriter, req *http.Request)
		maxPages     int
		wants        []string
		is           error
		maxRequests  int32
		wantRecorded bool
	}{
		{name: "one page", page: func(w http.ResponseWriter, req *http.Request) {
			fmt.Fprintf(w, `{"tags":[%q,"latest"]}`, tag)
		}, wantRecorded: true, maxRequests: 1},
		{name: "two pages", page: func(w http.ResponseWriter, req *http.Request) {
			if req.URL.Query().Get("last") == "" {
				w.Header().Set("Link", `</v2/kpreload/cells/tags/list?last=latest&n=1>; rel="next"`)
				fmt.Fprint(w, `{"tags":["latest"]}`)
				return
			}
			fmt.Fprintf(w, `{"tags":[%q]}`, tag)
		}, wantRecorded: true, maxRequests: 2},
		{name: "links to itself", page: func(w http.ResponseWriter, req *http.Request) {
			w.Header().Set("Link", `</v2/kpreload/cells/tags/list>; rel="next"`)
			fmt.Fprintf(w, `{"tags":[%q]}`, tag)
		}, wants: []string{"a page already read", "/v2/kpreload/cells/tags/list"}, is: errPageRepeated, maxRequests: 2},
		{name: "links back two pages", page: func(w http.ResponseWriter, req *http.Request) {
			next := "/v2/kpreload/cells/tags/list?last=a"
			if req.URL.Query().Get("last") == "a" {
				next = "/v2/kpreload/cells/tags/list"
			}
			w.Header().Set("Link", "<"+next+`>; rel="next"`)
			fmt.Fprint(w, `{"tags":[]}`)
		}, wants: []string{"a page already read"}, is: errPageRepeated, maxRequests: 3},
		{name: "endless new pages", page: func(w http.ResponseWriter, req *http.Request) {
			n, _ := strconv.Atoi(req.URL.Query().Get("last"))
			w.Header().Set("Link", fmt.Sprintf(`</v2/kpreload/cells/tags/list?last=%d>; rel="next"`, n+1))
			fmt.Fprint(w, `{"tags":[]}`)
		}, maxPages: 50, wants: []string{"exceeded 50 pages"}, is: errdef.ErrTooManyPages, maxRequests: 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requests.Store(0)
			h.reg.HandleTags(func(w http.ResponseWriter, req *http.Request) {
				requests.Add(1)
				w.Header().Set("Content-Type", "application/json")
				tc.page(w, req)
			})
			defer h.reg.HandleTags(nil)
			recs, refused, err := h.open(Options{MaxTagPages: tc.maxPages}).List(context.Background())
			if n := requests.Load(); n > tc.maxRequests {
				t.Errorf("%d tags/list requests, want at most %d", n, tc.maxRequests)
			}
			if tc.wantRecorded {
				if err != nil || len(recs) != 1 || recs[0].Tag != tag || len(refused) != 0 {
					t.Errorf("List = %v, %v, %v; want the one cell", recs, refused, err)
				}
				return
			}
			wantErr(t, err, append([]string{"list tags"}, tc.wants...)...)
			if !errors.Is(err, tc.is) {
				t.Errorf("error %q does not wrap %v", err, tc.is)
			}
		})
	}
}

// TestHostileForeignArtifacts: tags that look like keys but are no cells
// are refused one by one, naming them; the cells among them are listed and
// pulled.
func TestHostileForeignArtifacts(t *testing.T) {
	h := newHostile(t)
	good := []*cell{h.push("good-a"), h.push("good-b")}
	foreign := strings.Repeat("f0", 32)
	cfg := h.reg.PutBlob([]byte("{}"))
	other, _ := json.Marshal(ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest, ArtifactType: "application/vnd.example.sbom",
		Config: ocispec.Descriptor{MediaType: "application/vnd.example.config", Digest: cfg, Size: 2}, Layers: []ocispec.Descriptor{},
	})
	h.reg.PutManifest(foreign, ocispec.MediaTypeImageManifest, other)
	garbled := strings.Repeat("0e", 32)
	h.reg.PutManifest(garbled, ocispec.MediaTypeImageManifest, []byte(`{"schemaVersion":2,"layers":[`))
	index := strings.Repeat("1d", 32)
	h.reg.PutManifest(index, ocispec.MediaTypeImageIndex, []byte(`{"schemaVersion":2,"manifests":[]}`))
	h.reg.PutManifest("latest", ocispec.MediaTypeImageManifest, other) // not key-like: skipped silently
	huge := strings.Repeat("4a", 32)
	h.reg.PutManifest(huge, ocispec.MediaTypeImageManifest, bytes.Repeat([]byte(" "), 5<<20))
	ghost := strings.Repeat("6c", 32) // listed, but its manifest is forbidden
	h.reg.PutManifest(ghost, ocispec.MediaTypeImageManifest, other)
	h.reg.HandleManifest(ghost, func(w http.ResponseWriter, req *http.Request) {
		w.WriteHeader(http.StatusForbidden)
	})

	r := h.open(Options{})
	recs, refused, err := r.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var gotTags []string
	for _, rec := range recs {
		gotTags = append(gotTags, rec.Tag)
	}
	wantTags := []string{manifest.KeyID(good[0].key), manifest.KeyID(good[1].key)}
	if !slices.Equal(gotTags, wantTags) {
		t.Errorf("List records = %v, want %v", gotTags, wantTags)
	}
	got := map[string]string{}
	for _, f := range refused {
		got[f.Tag] = f.Error()
	}
	for tag, want := range map[string]string{
		foreign: `"application/vnd.example.sbom" artifact, not a kpreload cell`,
		garbled: "unexpected end of JSON input",
		index:   "not an OCI image manifest",
		huge:    "declared size 5242880 outside 0..4194304",
		ghost:   "403",
	} {
		if !strings.Contains(got[tag], want) || !strings.Contains(got[tag], short(tag)) {
			t.Errorf("refusal of %s = %q, want one naming it and saying %q", short(tag), got[tag], want)
		}
	}
	if len(refused) != 5 {
		t.Errorf("refused %d tags, want 5: %v", len(refused), refused)
	}
	dst, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range good {
		if _, err := h.pull(context.Background(), r, dst, c); err != nil {
			t.Errorf("pull %s: %v", c.id, err)
		}
	}
}

// TestHostileListStops: a record the registry does not answer ends the
// listing (a broken registry, not one bad artifact), after the first-byte
// timeout.
func TestHostileListStops(t *testing.T) {
	h := newHostile(t)
	h.push("stops")
	silent := strings.Repeat("5b", 32)
	h.reg.PutManifest(silent, ocispec.MediaTypeImageManifest, []byte("{}"))
	h.reg.HandleManifest(silent, func(w http.ResponseWriter, req *http.Request) { <-req.Context().Done() })
	start := time.Now()
	recs, refused, err := h.open(Options{}).List(context.Background())
	wantErr(t, err, short(silent), "first-byte timeout 500ms")
	if !errors.Is(err, ErrTimeout) || recs != nil || refused != nil {
		t.Errorf("List = %v, %v, %v; want only an error wrapping ErrTimeout", recs, refused, err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("List took %s", took)
	}
}

// TestHostileSharedLayer: a cell whose set.json has 2000 module entries
// naming one layer is refused before that layer is fetched even once: one
// file cannot be 2000 modules (the store would refuse the set too).
func TestHostileSharedLayer(t *testing.T) {
	h := newHostile(t)
	c := h.push("shared")
	orig, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	id := remotetest.AddSet(t, orig, remotetest.Set{KernelTree: testenv.KernelTree(t, remotetest.Kernel), Driver: "shared", Version: "1.0", Key: c.key})
	set, err := orig.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(set.Modules, func(m manifest.Module) bool { return m.Name == "failover" }) // depends on nothing
	if i < 0 || len(set.Modules[i].Depends) != 0 {
		t.Fatalf("no module failover without dependencies in %+v", set.Modules)
	}
	mod := set.Modules[i]
	layer, err := os.ReadFile(orig.ObjectPath(mod.SHA256))
	if err != nil {
		t.Fatal(err)
	}
	forged := set.Clone()
	forged.Modules = nil
	for i := range 2000 {
		m := mod
		m.Name, m.File = fmt.Sprintf("failover_%d", i), fmt.Sprintf("failover_%d.ko", i)
		forged.Modules = append(forged.Modules, m)
	}
	forged.External = nil
	forged.Canonicalize()
	if err := forged.Validate(); err != nil {
		t.Fatal(err.Error()[:min(len(err.Error()), 500)])
	}
	setJSON, err := manifest.Marshal(forged)
	if err != nil {
		t.Fatal(err)
	}
	h.reg.PutBlob(setJSON)
	d := h.reg.PutBlob(layer)
	layers := []ocispec.Descriptor{descriptor(MediaTypeSet, digest.FromBytes(setJSON), int64(len(setJSON)), "set.json")}
	for _, m := range forged.Modules {
		layers = append(layers, descriptor(MediaTypeModule, d, m.Size, m.File))
	}
	ann := cellAnnotations(manifest.KeyID(c.key), StateOK, "shared", forged.Kernel, forged.Driver, forged.Version, forged.Flavor)
	ann[AnnotationSetID] = manifest.IDOf(setJSON)
	keyJSON, b, err := cellManifest(c.key, layers, ann)
	if err != nil {
		t.Fatal(err)
	}
	h.reg.PutBlob(keyJSON)
	h.reg.PutManifest(manifest.KeyID(c.key), ocispec.MediaTypeImageManifest, b)

	_, err = h.pull(context.Background(), h.open(Options{}), nil, c)
	wantErr(t, err, "cell shared for "+remotetest.Kernel, "2000 module entries (failover_0.ko, failover_1.ko, ...) name one layer, "+d.String())
	if len(err.Error()) > 1000 {
		t.Errorf("the error is %d bytes long, want a short one", len(err.Error()))
	}
	if n := h.reg.BlobFetches(d); n != 0 {
		t.Errorf("the layer 2000 module entries share was fetched %d times, want 0", n)
	}
}

// TestPullTempDir: a pull downloads into a TempDir of the cache, removed
// however the pull ends; one a killed pull left is removed by the next pull
// and by Repair, one in use by neither.
func TestPullTempDir(t *testing.T) {
	h := newHostile(t)
	c := h.push("tempdir")
	r := h.open(Options{Timeouts: Timeouts{Total: 10 * time.Second, Idle: 10 * time.Second}})
	dst, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// A pull cancelled midway (SIGINT, SIGTERM in the CLI).
	d := digest.NewDigestFromEncoded(digest.SHA256, c.mods[1].SHA256)
	ctx, cancel := context.WithCancel(context.Background())
	h.reg.HandleBlob(d, remotetest.Stall(h.reg.Blob(d), 100, func() {
		if ents, _ := filepath.Glob(filepath.Join(dst.Dir(), ".tmp-pull-*", "*")); len(ents) < 2 {
			t.Errorf("while downloading, the cache's temporary directory holds %v, want the lock and the first module", ents)
		}
		cancel()
	}))
	_, err = h.pull(ctx, r, dst, c)
	wantErr(t, err, "context canceled", c.mods[1].File)
	h.reg.HandleBlob(d, nil)

	// A directory still in use, and what a SIGKILLed pull leaves: its
	// directory, its unlocked lock file and a partial download.
	scratch, err := dst.TempDir(context.Background(), "pull")
	if err != nil {
		t.Fatal(err)
	}
	live, release := scratch.Dir(), scratch.Remove
	dead := filepath.Join(dst.Dir(), ".tmp-pull-dead")
	for _, f := range []string{".lock", c.mods[0].SHA256} {
		if err := os.MkdirAll(dead, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dead, f), []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Pull(context.Background(), dst, c.key, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the next pull left the killed pull's directory: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the next pull removed a directory in use: %v", err)
	}
	rep, err := dst.Repair(context.Background())
	if err != nil || len(rep.TempFiles) != 0 {
		t.Errorf("Repair with a directory in use = %+v, %v; want it left alone", rep, err)
	}
	if err := os.Mkdir(dead, 0o755); err != nil { // killed before it took its lock
		t.Fatal(err)
	}
	if rep, err := dst.Repair(context.Background()); err != nil || !slices.Equal(rep.TempFiles, []string{dead}) {
		t.Errorf("Repair = %+v, %v; want %s removed", rep, err, dead)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	checkCache(t, dst)
}
