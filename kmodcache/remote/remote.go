// Package remote keeps module-cache cells on any OCI registry (ECR, GAR,
// GHCR, Harbor, a local distribution registry), built on oras-go.
//
// A cell is one recipe built for one kernel, named by its content key (the
// build inputs builder/matrix computes; manifest.KeyID is the SHA-256 of the
// key). Each cell is one OCI artifact in the repository, tagged by that key
// id:
//
//	artifactType  application/vnd.kpreload.cell.v1
//	config        the cache key as JSON        application/vnd.kpreload.cell.key.v1+json
//	layers        the set's manifest           application/vnd.kpreload.set.v1+json
//	              each module file             application/vnd.kpreload.module.v1
//	              supported-gpus.json          application/vnd.kpreload.supported-gpus.v1+json
//	annotations   dev.kpreload.{state,kernel,recipe,driver,version,flavor,key,first-error}
//
// A failed cell is recorded too (state "failed", its first compiler error and
// the tail of its build log as the one layer), so nobody rebuilds a known
// failure whose key has not changed.
//
// Module layers are the cache's own objects: a layer's digest is the object's
// SHA-256, so a pull verifies every byte twice (against the OCI descriptor
// while downloading, then against the set manifest when the store adds it).
// A push uploads every blob first and the manifest last, by tag, in one
// request: a push killed midway leaves blobs no tag names, never a tag a pull
// would take as complete. A pull downloads into a temporary directory and adds
// the set to the store only when everything verified: a corrupt or truncated
// blob is refused, naming the cell, and never enters the local cache.
package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"
	"oras.land/oras-go/v2/registry/remote/retry"

	"github.com/kpreload/kpreload/kmodcache/manifest"
)

// Media types of a cell artifact.
const (
	ArtifactType       = "application/vnd.kpreload.cell.v1"
	MediaTypeKey       = "application/vnd.kpreload.cell.key.v1+json"
	MediaTypeSet       = "application/vnd.kpreload.set.v1+json"
	MediaTypeModule    = "application/vnd.kpreload.module.v1"
	MediaTypeGPUs      = "application/vnd.kpreload.supported-gpus.v1+json"
	MediaTypeBuildLog  = "text/plain; charset=utf-8"
	annotationPrefix   = "dev.kpreload."
	AnnotationState    = annotationPrefix + "state"
	AnnotationKernel   = annotationPrefix + "kernel"
	AnnotationRecipe   = annotationPrefix + "recipe"
	AnnotationDriver   = annotationPrefix + "driver"
	AnnotationVersion  = annotationPrefix + "version"
	AnnotationFlavor   = annotationPrefix + "flavor"
	AnnotationKey      = annotationPrefix + "key"
	AnnotationFirstErr = annotationPrefix + "first-error"
	AnnotationSetID    = annotationPrefix + "set-id"
)

// States a record has.
const (
	// StateOK: the artifact holds the cell's module set.
	StateOK = "ok"
	// StateFailed: the cell failed to compile with this key.
	StateFailed = "failed"
)

// ErrNotFound is wrapped by errors for a key the registry holds no record of.
var ErrNotFound = errors.New("not in the registry")

// Options configures Open.
type Options struct {
	// PlainHTTP talks HTTP instead of HTTPS (a local registry); only when asked.
	PlainHTTP bool
	// DockerConfig is the Docker config file to read credentials from; ""
	// means the standard place ($DOCKER_CONFIG/config.json, else
	// ~/.docker/config.json), with its credential helpers.
	DockerConfig string
}

// Remote is one repository of a registry holding cells.
type Remote struct {
	url  string
	repo *remote.Repository
}

// Parse checks a remote URL, oci://HOST[:PORT]/REPO[/...], and returns the
// registry reference "HOST[:PORT]/REPO".
func Parse(raw string) (string, error) {
	rest, ok := strings.CutPrefix(raw, "oci://")
	if !ok {
		return "", fmt.Errorf("remote %q: want oci://HOST[:PORT]/REPO", raw)
	}
	u, err := url.Parse("oci://" + rest)
	if err != nil || u.Host == "" || strings.Trim(u.Path, "/") == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("remote %q: want oci://HOST[:PORT]/REPO (no user, query or tag)", raw)
	}
	path := strings.Trim(u.Path, "/")
	if strings.ContainsAny(path, ":@") {
		return "", fmt.Errorf("remote %q: the repository %q may not carry a tag or digest: cells are tagged by their keys", raw, path)
	}
	return u.Host + "/" + path, nil
}

// Open returns the repository at raw (oci://HOST[:PORT]/REPO). Credentials
// come from the Docker config and its credential helpers, as docker login
// and oras login write them; nothing is contacted yet.
func Open(raw string, o Options) (*Remote, error) {
	ref, err := Parse(raw)
	if err != nil {
		return nil, err
	}
	repo, err := remote.NewRepository(ref)
	if err != nil {
		return nil, fmt.Errorf("remote %s: %w", raw, err)
	}
	repo.PlainHTTP = o.PlainHTTP
	var store credentials.Store
	if o.DockerConfig != "" {
		store, err = credentials.NewStore(o.DockerConfig, credentials.StoreOptions{})
	} else {
		store, err = credentials.NewStoreFromDocker(credentials.StoreOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("remote %s: read Docker credentials: %w", raw, err)
	}
	header := http.Header{}
	header.Set("User-Agent", "kpreload")
	repo.Client = &auth.Client{
		Client:     retry.DefaultClient,
		Header:     header,
		Cache:      auth.NewCache(),
		Credential: credentials.Credential(store),
	}
	return &Remote{url: raw, repo: repo}, nil
}

// String returns the remote's URL.
func (r *Remote) String() string { return r.url }

// Record is what the registry says about one cell.
type Record struct {
	// Tag is the cell's key id, its tag.
	Tag string `json:"tag"`
	// Digest is the artifact manifest's digest.
	Digest string `json:"digest"`
	// State is StateOK or StateFailed.
	State string `json:"state"`
	// Recipe is the recipe the cell was built from ("" when pushed from a
	// cache alone, kpreload cache push).
	Recipe string `json:"recipe,omitempty"`
	// Kernel, Driver, Version and Flavor name the cell.
	Kernel  string `json:"kernel"`
	Driver  string `json:"driver"`
	Version string `json:"version"`
	Flavor  string `json:"flavor,omitempty"`
	// SetID is the set's id (state ok).
	SetID string `json:"set_id,omitempty"`
	// FirstError is the first compiler error (state failed).
	FirstError string `json:"first_error,omitempty"`
	// Created is when the artifact was pushed.
	Created time.Time `json:"created"`
	// Size is the sum of the layers' sizes.
	Size int64 `json:"size"`

	manifest ocispec.Manifest
}

// Cell names the cell a record describes: the recipe when known, else
// "driver version flavor".
func (rec *Record) Cell() string {
	if rec.Recipe != "" {
		return rec.Recipe
	}
	return strings.TrimSpace(rec.Driver + " " + rec.Version + " " + rec.Flavor)
}

// describe names a record's cell for messages.
func (rec *Record) describe() string {
	return fmt.Sprintf("cell %s for %s (key %s)", rec.Cell(), rec.Kernel, short(rec.Tag))
}

// Lookup returns the record tagged with key's id; the error wraps ErrNotFound
// when there is none.
func (r *Remote) Lookup(ctx context.Context, key map[string]string) (*Record, error) {
	tag := manifest.KeyID(key)
	if tag == "" {
		return nil, fmt.Errorf("remote %s: the cell has no cache key", r.url)
	}
	return r.record(ctx, tag)
}

// record fetches and checks the artifact manifest tagged tag.
func (r *Remote) record(ctx context.Context, tag string) (*Record, error) {
	desc, err := r.repo.Resolve(ctx, tag)
	if errors.Is(err, errdef.ErrNotFound) {
		return nil, fmt.Errorf("remote %s: key %s: %w", r.url, short(tag), ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("remote %s: resolve key %s: %w", r.url, short(tag), err)
	}
	b, err := fetchAll(ctx, r.repo, desc, 4<<20)
	if err != nil {
		return nil, fmt.Errorf("remote %s: key %s: manifest: %w", r.url, short(tag), err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("remote %s: key %s: manifest %s: %w", r.url, short(tag), desc.Digest, err)
	}
	if m.ArtifactType != ArtifactType {
		return nil, fmt.Errorf("remote %s: tag %s is a %q artifact, not a kpreload cell (%s)", r.url, short(tag), m.ArtifactType, ArtifactType)
	}
	a := m.Annotations
	rec := &Record{
		Tag: tag, Digest: desc.Digest.String(), State: a[AnnotationState],
		Recipe: a[AnnotationRecipe], Kernel: a[AnnotationKernel], Driver: a[AnnotationDriver],
		Version: a[AnnotationVersion], Flavor: a[AnnotationFlavor], SetID: a[AnnotationSetID],
		FirstError: a[AnnotationFirstErr], manifest: m,
	}
	if t, err := time.Parse(time.RFC3339, a[ocispec.AnnotationCreated]); err == nil {
		rec.Created = t
	}
	for _, l := range m.Layers {
		rec.Size += l.Size
	}
	if a[AnnotationKey] != tag {
		return nil, fmt.Errorf("remote %s: %s: its manifest names key %q, not its tag", r.url, rec.describe(), a[AnnotationKey])
	}
	if rec.State != StateOK && rec.State != StateFailed {
		return nil, fmt.Errorf("remote %s: %s: unknown state %q", r.url, rec.describe(), rec.State)
	}
	return rec, nil
}

// List returns the record of every cell tag in the repository, sorted by
// cell, kernel and time; tags that are not cells are skipped.
func (r *Remote) List(ctx context.Context) ([]*Record, error) {
	var tags []string
	err := r.repo.Tags(ctx, "", func(ts []string) error {
		tags = append(tags, ts...)
		return nil
	})
	if err != nil && !errors.Is(err, errdef.ErrNotFound) {
		return nil, fmt.Errorf("remote %s: list tags: %w", r.url, err)
	}
	var out []*Record
	for _, tag := range tags {
		if !manifest.IsDigest(tag) {
			continue
		}
		rec, err := r.record(ctx, tag)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	sortRecords(out)
	return out, nil
}

// short abbreviates a key id or digest for messages.
func short(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// stallBeforeManifest is a fault-injection knob for the end-to-end tests:
// when $KPRELOAD_REMOTE_STALL_BEFORE_MANIFEST is set, a push stops after its
// blobs and before its manifest (saying so on stderr) until it is killed.
func stallBeforeManifest(ctx context.Context, what string) {
	if os.Getenv("KPRELOAD_REMOTE_STALL_BEFORE_MANIFEST") == "" {
		return
	}
	fmt.Fprintf(os.Stderr, "kpreload: remote: %s: blobs pushed, stalling before the manifest (KPRELOAD_REMOTE_STALL_BEFORE_MANIFEST)\n", what)
	<-ctx.Done()
}
