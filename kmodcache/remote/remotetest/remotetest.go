// Package remotetest is an OCI distribution registry for tests that can be
// told to misbehave. It speaks enough of the distribution API for oras-go
// (GET /v2/, tags/list, GET and HEAD of manifests and blobs, monolithic blob
// uploads and manifest PUTs), so real cells can be pushed into it with the
// remote package and then served as they are, altered, or through handlers
// that lie about sizes, never end, stall, redirect or loop.
package remotetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/kpreload/kpreload/kmodcache/store"
)

// Repo is the repository the registry serves.
const Repo = "kpreload/cells"

// Registry is a registry serving one repository, Repo.
type Registry struct {
	// Server is the HTTP server; its URL is the registry's.
	Server *httptest.Server

	mu          sync.Mutex
	blobs       map[digest.Digest][]byte
	manifests   map[string]manifest // by tag and by digest
	tags        []string
	uploads     map[string]bool
	blobGets    map[digest.Digest]int
	blobHandler map[digest.Digest]http.HandlerFunc
	manHandler  map[string]http.HandlerFunc
	tagsHandler http.HandlerFunc
}

type manifest struct {
	mediaType string
	body      []byte
}

// Start starts a registry, stopped when the test ends.
func Start(t testing.TB) *Registry {
	t.Helper()
	r := &Registry{
		blobs:       map[digest.Digest][]byte{},
		manifests:   map[string]manifest{},
		uploads:     map[string]bool{},
		blobGets:    map[digest.Digest]int{},
		blobHandler: map[digest.Digest]http.HandlerFunc{},
		manHandler:  map[string]http.HandlerFunc{},
	}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(func() {
		r.Server.CloseClientConnections() // handlers that stall end with their connections
		r.Server.Close()
	})
	return r
}

// Addr is the registry's HOST:PORT.
func (r *Registry) Addr() string { return strings.TrimPrefix(r.Server.URL, "http://") }

// URL is the repository's remote URL, oci://HOST:PORT/Repo (plain HTTP).
func (r *Registry) URL() string { return "oci://" + r.Addr() + "/" + Repo }

// PutBlob stores b and returns its digest.
func (r *Registry) PutBlob(b []byte) digest.Digest {
	d := digest.FromBytes(b)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.blobs[d] = slices.Clone(b)
	return d
}

// SetBlob makes the registry serve b as the blob d (whatever d's true bytes).
func (r *Registry) SetBlob(d digest.Digest, b []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.blobs[d] = slices.Clone(b)
}

// Blob returns what the registry serves as blob d, or nil.
func (r *Registry) Blob(d digest.Digest) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.blobs[d])
}

// HandleBlob makes h answer the GETs of blob d (HEAD still answers from the
// stored blob); nil restores the stored blob.
func (r *Registry) HandleBlob(d digest.Digest, h http.HandlerFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h == nil {
		delete(r.blobHandler, d)
		return
	}
	r.blobHandler[d] = h
}

// HandleManifest makes h answer the GETs and HEADs of manifest ref (a tag
// or digest); nil restores the stored manifest.
func (r *Registry) HandleManifest(ref string, h http.HandlerFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h == nil {
		delete(r.manHandler, ref)
		return
	}
	r.manHandler[ref] = h
}

// HandleTags makes h answer GET tags/list; nil restores the stored tags.
func (r *Registry) HandleTags(h http.HandlerFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tagsHandler = h
}

// BlobFetches returns how many GETs blob d had.
func (r *Registry) BlobFetches(d digest.Digest) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.blobGets[d]
}

// PutManifest stores b (of mediaType) under tag (none if "") and its
// digest, and returns the digest.
func (r *Registry) PutManifest(tag, mediaType string, b []byte) digest.Digest {
	d := digest.FromBytes(b)
	r.mu.Lock()
	defer r.mu.Unlock()
	m := manifest{mediaType: mediaType, body: slices.Clone(b)}
	r.manifests[d.String()] = m
	if tag != "" {
		r.manifests[tag] = m
		if !slices.Contains(r.tags, tag) {
			r.tags = append(r.tags, tag)
		}
	}
	return d
}

// Manifest returns the manifest stored under ref (a tag or digest) and its
// media type.
func (r *Registry) Manifest(ref string) ([]byte, string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.manifests[ref]
	return slices.Clone(m.body), m.mediaType, ok
}

// Tags returns the tags, sorted.
func (r *Registry) Tags() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := slices.Clone(r.tags)
	slices.Sort(t)
	return t
}

// serve answers the distribution API for Repo.
func (r *Registry) serve(w http.ResponseWriter, req *http.Request) {
	p := req.URL.Path
	if p == "/v2/" || p == "/v2" {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, "{}")
		return
	}
	rest, ok := strings.CutPrefix(p, "/v2/"+Repo+"/")
	if !ok {
		apiError(w, http.StatusNotFound, "NAME_UNKNOWN", "repository name not known to registry")
		return
	}
	switch {
	case rest == "tags/list" && req.Method == http.MethodGet:
		r.mu.Lock()
		h := r.tagsHandler
		r.mu.Unlock()
		if h != nil {
			h(w, req)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"name":%q,"tags":[%s]}`, Repo, quoteAll(r.Tags()))
	case strings.HasPrefix(rest, "manifests/"):
		r.serveManifest(w, req, strings.TrimPrefix(rest, "manifests/"))
	case rest == "blobs/uploads/" && req.Method == http.MethodPost:
		id := newID()
		r.mu.Lock()
		r.uploads[id] = true
		r.mu.Unlock()
		w.Header().Set("Location", "/v2/"+Repo+"/blobs/uploads/"+id)
		w.Header().Set("Docker-Upload-UUID", id)
		w.WriteHeader(http.StatusAccepted)
	case strings.HasPrefix(rest, "blobs/uploads/") && req.Method == http.MethodPut:
		r.finishUpload(w, req, strings.TrimPrefix(rest, "blobs/uploads/"))
	case strings.HasPrefix(rest, "blobs/"):
		r.serveBlob(w, req, digest.Digest(strings.TrimPrefix(rest, "blobs/")))
	default:
		apiError(w, http.StatusNotFound, "UNSUPPORTED", "not served by this test registry")
	}
}

func (r *Registry) serveManifest(w http.ResponseWriter, req *http.Request, ref string) {
	r.mu.Lock()
	h := r.manHandler[ref]
	r.mu.Unlock()
	if h != nil && req.Method != http.MethodPut {
		h(w, req)
		return
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead:
		b, mt, ok := r.Manifest(ref)
		if !ok {
			apiError(w, http.StatusNotFound, "MANIFEST_UNKNOWN", "manifest unknown")
			return
		}
		w.Header().Set("Content-Type", mt)
		w.Header().Set("Docker-Content-Digest", digest.FromBytes(b).String())
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		if req.Method == http.MethodGet {
			w.Write(b)
		}
	case http.MethodPut:
		b, err := io.ReadAll(io.LimitReader(req.Body, 16<<20))
		if err != nil {
			apiError(w, http.StatusBadRequest, "MANIFEST_INVALID", err.Error())
			return
		}
		tag := ref
		if _, err := digest.Parse(ref); err == nil {
			tag = ""
		}
		d := r.PutManifest(tag, req.Header.Get("Content-Type"), b)
		w.Header().Set("Docker-Content-Digest", d.String())
		w.WriteHeader(http.StatusCreated)
	default:
		apiError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", req.Method)
	}
}

func (r *Registry) serveBlob(w http.ResponseWriter, req *http.Request, d digest.Digest) {
	r.mu.Lock()
	b, ok := r.blobs[d]
	h := r.blobHandler[d]
	if req.Method == http.MethodGet {
		r.blobGets[d]++
	}
	r.mu.Unlock()
	if req.Method == http.MethodGet && h != nil {
		h(w, req)
		return
	}
	if !ok {
		apiError(w, http.StatusNotFound, "BLOB_UNKNOWN", "blob unknown to registry")
		return
	}
	switch req.Method {
	case http.MethodHead:
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Header().Set("Docker-Content-Digest", d.String())
	case http.MethodGet:
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	default:
		apiError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", req.Method)
	}
}

func (r *Registry) finishUpload(w http.ResponseWriter, req *http.Request, id string) {
	r.mu.Lock()
	ok := r.uploads[id]
	delete(r.uploads, id)
	r.mu.Unlock()
	if !ok {
		apiError(w, http.StatusNotFound, "BLOB_UPLOAD_UNKNOWN", "upload unknown")
		return
	}
	want, err := digest.Parse(req.URL.Query().Get("digest"))
	if err != nil {
		apiError(w, http.StatusBadRequest, "DIGEST_INVALID", err.Error())
		return
	}
	b, err := io.ReadAll(io.LimitReader(req.Body, 64<<20))
	if err != nil || digest.FromBytes(b) != want {
		apiError(w, http.StatusBadRequest, "DIGEST_INVALID", "digest does not match the content")
		return
	}
	r.PutBlob(b)
	w.Header().Set("Location", "/v2/"+Repo+"/blobs/"+want.String())
	w.Header().Set("Docker-Content-Digest", want.String())
	w.WriteHeader(http.StatusCreated)
}

// apiError writes a distribution API error.
func apiError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"errors":[{"code":%q,"message":%q}]}`, code, msg)
}

func quoteAll(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, ",")
}

func newID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Handlers a hostile registry answers blob GETs with.

// Body serves b as the blob, with a Content-Length header or without one
// (chunked).
func Body(b []byte, contentLength bool) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		if contentLength {
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		}
		w.Write(b)
		if !contentLength {
			w.(http.Flusher).Flush()
		}
	}
}

// Endless serves a body that never ends, without a Content-Length, until
// the client goes away.
func Endless() http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		chunk := make([]byte, 32<<10)
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			if req.Context().Err() != nil {
				return
			}
		}
	}
}

// Stall serves the first n bytes of b (with b's Content-Length), calls
// started if not nil, then sends nothing more until the client goes away.
func Stall(b []byte, n int, started func()) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b[:n])
		w.(http.Flusher).Flush()
		if started != nil {
			started()
		}
		<-req.Context().Done()
	}
}

// Trickle serves b one byte every interval (with b's Content-Length): never
// idle for long, always slow.
func Trickle(b []byte, interval time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		for i := range b {
			if _, err := w.Write(b[i : i+1]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-req.Context().Done():
				return
			case <-time.After(interval):
			}
		}
	}
}

// Redirect answers with a 307 to url.
func Redirect(url string) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		http.Redirect(w, req, url, http.StatusTemporaryRedirect)
	}
}

// Silent listens on loopback, accepts connections and never answers (nor
// closes them, until the test ends); it returns the HOST:PORT.
func Silent(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// Kernel is the kernel whose real modules AddSet uses: a test passes its
// unpacked tree (testenv.KernelTree(t, remotetest.Kernel)) as Set.KernelTree.
const Kernel = "6.1.0-56-cloud-amd64"

// Set describes a module set for AddSet: three real modules of Kernel
// (virtio_net and the two it needs) under the given names.
type Set struct {
	// KernelTree is Kernel's unpacked package tree (its lib/modules/Kernel holds the modules).
	KernelTree              string
	Driver, Version, Flavor string
	// Key is the set's cache key.
	Key map[string]string
	// GPUs, if not nil, is the set's supported-gpus.json.
	GPUs []byte
}

// AddSet adds s to st and returns the set's id.
func AddSet(t testing.TB, st *store.Store, s Set) string {
	t.Helper()
	if s.KernelTree == "" {
		t.Fatal("remotetest.AddSet: Set.KernelTree is empty (testenv.KernelTree(t, remotetest.Kernel))")
	}
	tree := filepath.Join(s.KernelTree, "lib", "modules", Kernel)
	var files []string
	for _, m := range []string{"kernel/drivers/net/virtio_net", "kernel/drivers/net/net_failover", "kernel/net/core/failover"} {
		files = append(files, filepath.Join(tree, m+".ko"))
	}
	req := store.AddRequest{Driver: s.Driver, Version: s.Version, Flavor: s.Flavor, Files: files, CacheKey: s.Key}
	if s.GPUs != nil {
		req.SupportedGPUs = filepath.Join(t.TempDir(), "supported-gpus.json")
		if err := os.WriteFile(req.SupportedGPUs, s.GPUs, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, id, err := st.AddFiles(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
