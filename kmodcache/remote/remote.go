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
//	              dev.kpreload.{statement,signature,signer} when signed
//
// A signed cell's statement (cellsign.Statement) names everything a pull
// chooses by; with Options.Trust those fields are read from it alone, the
// newest generation of each identity is taken (Select), and the cache
// remembers the newest it has seen (SeenFile) to refuse a rollback.
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
// would take as complete. A pull downloads into a temporary directory inside
// the cache (store.TempDir, removed on every exit path; one a killed pull
// left is removed by the next) and adds the set to the store only when
// everything verified: a corrupt or truncated blob is refused, naming the
// cell, and never enters the local cache.
//
// Nothing the registry says is trusted: every request has a connect, a
// first-byte and an idle timeout and every operation a total one (Timeouts);
// redirects are bounded (Options.MaxRedirects, never to another scheme, never
// in a loop), and so is the tags/list pagination (Options.MaxTagPages, a page
// read twice ends the listing); a blob is read up to the size its descriptor
// declares and no further, a module's descriptor must declare the size the
// set manifest does, and each blob is downloaded once per pull however many
// module entries name it. A tag that is not a readable cell is reported by
// List and skipped (Refusal).
package remote

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"
	"oras.land/oras-go/v2/registry/remote/errcode"

	"github.com/kpreload/kpreload/kmodcache/cellsign"
	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/names"
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
	// AnnotationStatement carries the statement a cell's signature covers
	// (a cellsign.Statement as JSON: every field a pull chooses by);
	// AnnotationSignature and AnnotationSigner carry the signature
	// (kmodcache/cellsign) and the id of the key that made it.
	AnnotationStatement = annotationPrefix + "statement"
	AnnotationSignature = annotationPrefix + "signature"
	AnnotationSigner    = annotationPrefix + "signer"
)

// What a record's Trust says of it.
const (
	// TrustVerified: signed by a key of Options.Trust; every field that
	// names and orders the cell comes from the signed statement.
	TrustVerified = "verified"
	// TrustUnverified: signed, but read without Options.Trust, so nothing
	// was checked.
	TrustUnverified = "unverified"
	// TrustUnsigned: not signed, read without Options.Trust.
	TrustUnsigned = "unsigned"
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

// ErrUntrusted is wrapped by errors for a cell whose signature does not
// verify against Options.Trust (unsigned, signed by another key, or
// tampered with); the error also wraps cellsign's reason and names the key.
var ErrUntrusted = errors.New("untrusted cell")

// Options configures Open.
type Options struct {
	// PlainHTTP talks HTTP instead of HTTPS (a local registry); only when asked.
	PlainHTTP bool
	// DockerConfig is the Docker config file to read credentials from,
	// with its credential helpers; commands fill in the standard place
	// (DockerConfigPath) when none is named. "" reads none: the registry is
	// asked anonymously (a system service or a kernel hook has no home).
	DockerConfig string
	// StallBeforeManifest stops every push after its blobs and before its
	// manifest (saying so on stderr) until the context ends: a
	// fault-injection knob for end-to-end tests, which set it through
	// $KPRELOAD_REMOTE_STALL_BEFORE_MANIFEST of the kpreload command.
	StallBeforeManifest bool
	// Timeouts bound every request and operation; zero fields take the
	// defaults.
	Timeouts Timeouts
	// MaxRedirects is how many redirects one request may follow
	// (DefaultMaxRedirects when 0).
	MaxRedirects int
	// MaxTagPages is how many tags/list pages one listing may read
	// (DefaultMaxTagPages when 0).
	MaxTagPages int
	// Signer, if set, signs every cell pushed (built sets and failure
	// records).
	Signer *cellsign.Signer
	// Trust, if set, makes every record read (lookups, listings, pulls)
	// verify against these keys: an unsigned or foreign-signed cell is
	// refused with ErrUntrusted, and what names and orders a cell is read
	// from its signed statement only. Without it cells are taken as the
	// registry's annotations describe them (Record.Trust says "unsigned" or
	// "unverified"), their blobs and metadata still verified.
	Trust *cellsign.Trust
}

// Remote is one repository of a registry holding cells.
type Remote struct {
	url      string
	repo     *remote.Repository
	timeouts Timeouts
	signer   *cellsign.Signer
	trust    *cellsign.Trust
	stall    bool
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
		// No Docker configuration to read; the registry is asked anonymously.
		store = credentials.NewMemoryStore()
	}
	if err != nil {
		return nil, fmt.Errorf("remote %s: read Docker credentials: %w", raw, err)
	}
	header := http.Header{}
	header.Set("User-Agent", "kpreload")
	t := o.Timeouts.withDefaults()
	if o.MaxRedirects <= 0 {
		o.MaxRedirects = DefaultMaxRedirects
	}
	if o.MaxTagPages <= 0 {
		o.MaxTagPages = DefaultMaxTagPages
	}
	repo.TagListMaxPages = o.MaxTagPages
	repo.MaxMetadataBytes = maxManifestBytes
	repo.Client = &auth.Client{
		Client:     newHTTPClient(t, o.MaxRedirects),
		Header:     header,
		Cache:      auth.NewCache(),
		Credential: credentials.Credential(store),
	}
	return &Remote{url: raw, repo: repo, timeouts: t, signer: o.Signer, trust: o.Trust, stall: o.StallBeforeManifest}, nil
}

// Limits on what the registry sends.
const (
	// maxManifestBytes bounds an artifact manifest.
	maxManifestBytes = 4 << 20
	// maxKeyBytes bounds a cell's key (its config blob).
	maxKeyBytes = 1 << 20
	// maxSetBytes bounds a cell's set manifest.
	maxSetBytes = 16 << 20
	// maxLayerBytes bounds one layer (a module file).
	maxLayerBytes = 4 << 30
)

// bound limits ctx to one operation's total timeout. end cancels it and
// returns err, saying so when the total timeout caused it.
func (r *Remote) bound(ctx context.Context) (_ context.Context, end func(error) error) {
	cause := fmt.Errorf("%w: the operation took longer than its total timeout, %s", ErrTimeout, r.timeouts.Total)
	ctx, cancel := context.WithTimeoutCause(ctx, r.timeouts.Total, cause)
	return ctx, func(err error) error {
		defer cancel()
		if err != nil && context.Cause(ctx) == cause && !errors.Is(err, ErrTimeout) {
			err = fmt.Errorf("%w (%w)", err, cause)
		}
		return err
	}
}

// Trusting reports whether records are verified against trusted keys
// (Options.Trust).
func (r *Remote) Trusting() bool { return r.trust != nil }

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
	// Generation orders the cells of one identity (see Newer): the signed
	// statement's, so 0 unless Trust is TrustVerified.
	Generation uint64 `json:"generation,omitempty"`
	// Signer is the id of the key that signed the cell ("" if unsigned);
	// with Options.Trust set, every record returned has been verified.
	Signer string `json:"signer,omitempty"`
	// Trust says whether the record was verified: TrustVerified,
	// TrustUnverified or TrustUnsigned.
	Trust string `json:"trust"`

	manifest      ocispec.Manifest
	signature     cellsign.Signature
	statement     []byte
	rawFirstError string
}

// signedSubject is what a cell's signature covers besides its key and
// state: the set id of a built cell, the SHA-256 of the first-error
// annotation of a failure record.
func signedSubject(state, setID, firstError string) string {
	if state == StateOK {
		return setID
	}
	sum := sha256.Sum256([]byte(firstError))
	return hex.EncodeToString(sum[:])
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
	ctx, end := r.bound(ctx)
	rec, err := r.lookup(ctx, key)
	return rec, end(err)
}

func (r *Remote) lookup(ctx context.Context, key map[string]string) (*Record, error) {
	tag := manifest.KeyID(key)
	if tag == "" {
		return nil, fmt.Errorf("remote %s: the cell has no cache key", r.url)
	}
	return r.record(ctx, tag)
}

// record fetches and checks the artifact manifest tagged tag.
func (r *Remote) record(ctx context.Context, tag string) (*Record, error) {
	rec, err := r.readRecord(ctx, tag)
	if err != nil {
		return nil, err
	}
	if r.trust != nil {
		if err := rec.verify(r.trust); err != nil {
			return nil, fmt.Errorf("remote %s: %s: %w: %w", r.url, rec.describe(), ErrUntrusted, err)
		}
	}
	return rec, nil
}

// verify checks rec's signature against t and takes every field that names
// and orders the cell from the signed statement, never from the unsigned
// annotations: state, set (or failure digest), driver, version, flavour,
// kernel, recipe, creation time and generation. The statement must name
// rec's tag.
func (rec *Record) verify(t *cellsign.Trust) error {
	st, err := t.Verify(rec.statement, rec.signature)
	if err != nil {
		return err
	}
	if st.Key != rec.Tag {
		return fmt.Errorf("%w: the statement signed by %s is for key %.80q, not this tag", cellsign.ErrBadSignature, rec.signature.KeyID, st.Key)
	}
	created, err := time.Parse(time.RFC3339, st.Created)
	if err != nil {
		return fmt.Errorf("%w: signed by %s: created %.40q is not an RFC 3339 time", cellsign.ErrBadStatement, rec.signature.KeyID, st.Created)
	}
	v := *rec
	v.State, v.Driver, v.Version, v.Flavor, v.Kernel, v.Recipe = st.State, st.Driver, st.Version, st.Flavor, st.Kernel, st.Recipe
	v.Created, v.Generation, v.Signer, v.Trust = created, st.Generation, rec.signature.KeyID, TrustVerified
	v.SetID = ""
	switch st.State {
	case StateOK:
		v.SetID = st.Subject
		if l, err := setLayer(rec.manifest); err != nil || l.Digest.Encoded() != st.Subject {
			return fmt.Errorf("%w: the set layer is not the set %s signed by %s", cellsign.ErrBadSignature, short(st.Subject), rec.signature.KeyID)
		}
	case StateFailed:
		if got := signedSubject(StateFailed, "", rec.rawFirstError); got != st.Subject {
			return fmt.Errorf("%w: the first-error annotation is not the one signed by %s", cellsign.ErrBadSignature, rec.signature.KeyID)
		}
	}
	if err := v.check(); err != nil {
		return fmt.Errorf("%w: signed by %s: %w", cellsign.ErrBadStatement, rec.signature.KeyID, err)
	}
	*rec = v
	return nil
}

// readRecord reads the record tagged tag, checking its form but not its
// signature (a pusher reading back what it pushed).
func (r *Remote) readRecord(ctx context.Context, tag string) (*Record, error) {
	desc, err := r.repo.Resolve(ctx, tag)
	if errors.Is(err, errdef.ErrNotFound) {
		return nil, fmt.Errorf("remote %s: key %s: %w", r.url, short(tag), ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("remote %s: resolve key %s: %w", r.url, short(tag), err)
	}
	if desc.MediaType != ocispec.MediaTypeImageManifest {
		return nil, fmt.Errorf("remote %s: tag %s is a %q, not an OCI image manifest (a kpreload cell is one)", r.url, short(tag), desc.MediaType)
	}
	b, err := fetchAll(ctx, r.repo, desc, maxManifestBytes)
	if err != nil {
		return nil, fmt.Errorf("remote %s: key %s: manifest %s: %w", r.url, short(tag), desc.Digest, err)
	}
	rec, err := parseRecord(tag, desc.Digest.String(), b)
	if err != nil {
		return nil, fmt.Errorf("remote %s: %w", r.url, err)
	}
	return rec, nil
}

// parseRecord decodes b, the artifact manifest (digest dgst) tagged tag, into
// the cell's record, refusing what is not a well-formed cell.
func parseRecord(tag, dgst string, b []byte) (*Record, error) {
	var m ocispec.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("key %s: manifest %s: %w", short(tag), dgst, err)
	}
	if m.ArtifactType != ArtifactType {
		return nil, fmt.Errorf("tag %s is a %q artifact, not a kpreload cell (%s)", short(tag), m.ArtifactType, ArtifactType)
	}
	if m.SchemaVersion != 2 || m.MediaType != ocispec.MediaTypeImageManifest {
		return nil, fmt.Errorf("tag %s: manifest %s is schema %d %q, want 2 %q", short(tag), dgst, m.SchemaVersion, m.MediaType, ocispec.MediaTypeImageManifest)
	}
	a := m.Annotations
	rec := &Record{
		Tag: tag, Digest: dgst, State: a[AnnotationState],
		Recipe: a[AnnotationRecipe], Kernel: a[AnnotationKernel], Driver: a[AnnotationDriver],
		Version: a[AnnotationVersion], Flavor: a[AnnotationFlavor], SetID: a[AnnotationSetID],
		FirstError: printable(a[AnnotationFirstErr]), manifest: m,
		Signer:        printable(a[AnnotationSigner]),
		Trust:         TrustUnsigned,
		signature:     cellsign.Signature{KeyID: a[AnnotationSigner], Value: a[AnnotationSignature]},
		statement:     []byte(a[AnnotationStatement]),
		rawFirstError: a[AnnotationFirstErr],
	}
	if rec.Signer != "" || a[AnnotationSignature] != "" {
		rec.Trust = TrustUnverified
	}
	if t, err := time.Parse(time.RFC3339, a[ocispec.AnnotationCreated]); err == nil {
		rec.Created = t
	}
	if a[AnnotationKey] != tag {
		return nil, fmt.Errorf("%s: its manifest names key %.80q, not its tag", rec.describe(), a[AnnotationKey])
	}
	if err := rec.check(); err != nil {
		return nil, err
	}
	if m.Config.MediaType != MediaTypeKey {
		return nil, fmt.Errorf("%s: config is a %.80q, want the cell's key (%s)", rec.describe(), m.Config.MediaType, MediaTypeKey)
	}
	for i, d := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
		if err := d.Digest.Validate(); err != nil || d.Digest.Algorithm() != digest.SHA256 {
			return nil, fmt.Errorf("%s: descriptor %d: digest %.80q is not a sha256 digest", rec.describe(), i, d.Digest)
		}
		if d.Size < 0 || d.Size > maxLayerBytes {
			return nil, fmt.Errorf("%s: blob %s: size %d outside 0..%d", rec.describe(), d.Digest, d.Size, int64(maxLayerBytes))
		}
		if i > 0 {
			rec.Size += d.Size
		}
	}
	return rec, nil
}

// check refuses a record whose names, state or set id are not well formed.
func (rec *Record) check() error {
	if len(rec.Recipe) > 256 || strings.ContainsFunc(rec.Recipe, unicode.IsControl) {
		return fmt.Errorf("tag %s: the recipe annotation %.64q is not a name (at most 256 characters, no control characters)", short(rec.Tag), rec.Recipe)
	}
	// Kernel, driver, version and flavour become paths of the cache a pull
	// fills: they follow the one names grammar, signed or not.
	for _, f := range []struct{ name, v string }{
		{"kernel", rec.Kernel}, {"driver", rec.Driver}, {"version", rec.Version}, {"flavor", rec.Flavor},
	} {
		if err := names.CheckOptional(f.name+" annotation", f.v); err != nil {
			return fmt.Errorf("tag %s: %w", short(rec.Tag), err)
		}
	}
	switch rec.State {
	case StateOK:
		if !manifest.IsDigest(rec.SetID) {
			return fmt.Errorf("%s: set id %.80q is not 64 lowercase hex digits", rec.describe(), rec.SetID)
		}
	case StateFailed:
	default:
		return fmt.Errorf("%s: unknown state %.80q", rec.describe(), rec.State)
	}
	return nil
}

// printable replaces the control characters of s (a terminal escape, say)
// with U+FFFD.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return unicode.ReplacementChar
		}
		return r
	}, s)
}

// Refusal is a tag that looks like a cell's (a key id, 64 hex digits) but is
// not a readable cell, and why.
type Refusal struct {
	// Tag is the tag.
	Tag string
	// Err says why it was refused.
	Err error
}

// Error says which tag was refused and why.
func (f *Refusal) Error() string { return fmt.Sprintf("tag %s: %v", short(f.Tag), f.Err) }

// Unwrap returns why the tag was refused.
func (f *Refusal) Unwrap() error { return f.Err }

// List returns the record of every cell tag in the repository, sorted by
// cell, kernel and time, and the cell tags (key ids) that are no readable
// cell (a foreign artifact, a manifest that does not parse, one the registry
// refuses to serve), each with why; tags that are not key ids are skipped.
// The listing of the tags and the fetch of each record are each an
// operation bounded by the total timeout. err is for the listing itself: the
// tags, or a record the registry could not be reached for (a timeout, a
// dropped connection), which ends the listing.
func (r *Remote) List(ctx context.Context) (recs []*Record, refused []*Refusal, err error) {
	tctx, end := r.bound(ctx)
	tags, err := r.cellTags(tctx)
	if err = end(err); err != nil {
		return nil, nil, err
	}
	for _, tag := range tags {
		rctx, end := r.bound(ctx)
		rec, err := r.record(rctx, tag)
		if err = end(err); err != nil {
			if ctx.Err() != nil || isTransport(err) {
				return nil, nil, err
			}
			refused = append(refused, &Refusal{Tag: tag, Err: err})
			continue
		}
		recs = append(recs, rec)
	}
	sortRecords(recs)
	return recs, refused, nil
}

// maxCellTags bounds how many cell tags a listing keeps.
const maxCellTags = 100000

// cellTags lists the repository's tags that are key ids, each once.
func (r *Remote) cellTags(ctx context.Context) ([]string, error) {
	var tags []string
	seen := map[string]bool{}
	err := r.repo.Tags(withTagPages(ctx), "", func(ts []string) error {
		for _, tag := range ts {
			if !manifest.IsDigest(tag) || seen[tag] {
				continue
			}
			if len(tags) == maxCellTags {
				return fmt.Errorf("refused: the registry lists more than %d cell tags", maxCellTags)
			}
			seen[tag] = true
			tags = append(tags, tag)
		}
		return nil
	})
	if err != nil && !errors.Is(err, errdef.ErrNotFound) {
		return nil, fmt.Errorf("remote %s: list tags: %w", r.url, err)
	}
	return tags, nil
}

// isTransport reports whether err is a failure of the registry or of
// talking to it (a timeout, a refused or dropped connection, a refused
// redirect, a server error or throttling that outlasted the retries, a
// cancelled context) rather than something wrong with one artifact.
func isTransport(err error) bool {
	var ue *url.Error
	var er *errcode.ErrorResponse
	return errors.Is(err, ErrTimeout) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ue) ||
		(errors.As(err, &er) && (er.StatusCode >= 500 || er.StatusCode == http.StatusTooManyRequests))
}

// short abbreviates a key id or digest for messages.
func short(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// DockerConfigPath is the standard place of the Docker config file, as
// Docker and oras-go find it: $DOCKER_CONFIG/config.json when dockerConfigEnv
// (the variable's value) is set, else $HOME/.docker/config.json when home is,
// else "" (no configuration: anonymous). Commands pass it the environment.
func DockerConfigPath(dockerConfigEnv, home string) string {
	switch {
	case dockerConfigEnv != "":
		return filepath.Join(dockerConfigEnv, "config.json")
	case home != "":
		return filepath.Join(home, ".docker", "config.json")
	}
	return ""
}

// stallBeforeManifest is the fault-injection knob Options.StallBeforeManifest:
// when on, a push stops after its blobs and before its manifest (saying so on
// stderr) until ctx ends.
func (r *Remote) stallBeforeManifest(ctx context.Context, what string) {
	if !r.stall {
		return
	}
	fmt.Fprintf(os.Stderr, "kpreload: remote: %s: blobs pushed, stalling before the manifest (KPRELOAD_REMOTE_STALL_BEFORE_MANIFEST)\n", what)
	<-ctx.Done()
}
