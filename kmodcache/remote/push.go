package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/kmodcache/cellsign"
	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// PushResult says what a push did.
type PushResult struct {
	// Record is the cell's record in the registry after the push.
	Record *Record
	// Pushed is false when the registry already held the cell (nothing was
	// uploaded).
	Pushed bool
	// Blobs and Bytes count what was uploaded (blobs the registry already
	// had are not).
	Blobs int
	Bytes int64
}

// pushAttempts is how often a push is tried: registries (distribution 2.8
// among them) can refuse a manifest while another client is uploading the
// same blob; the blobs are content-addressed, so trying again is safe.
const pushAttempts = 3

// PushSet uploads set id of st as the cell tagged with its cache key's id.
// recipe names the recipe it was built from ("" if unknown). A cell the
// registry already holds as built is left alone (Pushed false); a failure
// record under the same key is replaced. A push that fails is tried again
// (pushAttempts in all) unless another pusher completed the cell meanwhile;
// all of it within the total timeout.
func (r *Remote) PushSet(ctx context.Context, st *store.Store, id, recipe string) (*PushResult, error) {
	ctx, end := r.bound(ctx)
	res, err := r.pushSet(ctx, st, id, recipe)
	return res, end(err)
}

func (r *Remote) pushSet(ctx context.Context, st *store.Store, id, recipe string) (*PushResult, error) {
	var res *PushResult
	var err error
	for attempt := 1; ; attempt++ {
		res, err = r.pushSetOnce(ctx, st, id, recipe)
		if err == nil || attempt == pushAttempts || ctx.Err() != nil {
			return res, err
		}
		if m, gerr := st.Get(id); gerr == nil {
			if rec, lerr := r.record(ctx, manifest.KeyID(m.CacheKey)); lerr == nil && rec.State == StateOK {
				return &PushResult{Record: rec}, nil // another pusher completed it
			}
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Duration(attempt) * 250 * time.Millisecond):
		}
	}
}

func (r *Remote) pushSetOnce(ctx context.Context, st *store.Store, id, recipe string) (*PushResult, error) {
	m, err := st.Get(id)
	if err != nil {
		return nil, fmt.Errorf("push set %s: %w", short(id), err)
	}
	tag := manifest.KeyID(m.CacheKey)
	what := fmt.Sprintf("push %s %s for %s (set %s)", m.Driver, m.Version, m.Kernel, short(id))
	if tag == "" {
		return nil, fmt.Errorf("%s: the set has no cache key, so no cell can name it (sets built by kpreload build have one)", what)
	}
	if rec, err := r.readRecord(ctx, tag); err == nil && rec.State == StateOK && r.keeps(rec) {
		return &PushResult{Record: rec}, nil
	} else if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	setJSON, err := manifest.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if got := manifest.IDOf(setJSON); got != id {
		return nil, fmt.Errorf("%s: the set's manifest has id %s", what, got)
	}
	res := &PushResult{Pushed: true}
	setDesc := descriptor(MediaTypeSet, digest.FromBytes(setJSON), int64(len(setJSON)), "set.json")
	if err := r.pushBlob(ctx, setDesc, func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(setJSON)), nil }, res); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	layers := []ocispec.Descriptor{setDesc}
	type object struct{ mediaType, file, sha string }
	var objects []object
	for _, mod := range m.Modules {
		objects = append(objects, object{MediaTypeModule, mod.File, mod.SHA256})
	}
	if f := m.SupportedGPUs; f != nil {
		objects = append(objects, object{MediaTypeGPUs, f.File, f.SHA256})
	}
	for _, o := range objects {
		f, err := st.OpenObject(o.sha)
		var fi os.FileInfo
		if err == nil {
			fi, err = f.Stat()
			f.Close()
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", what, o.file, err)
		}
		d := descriptor(o.mediaType, digest.NewDigestFromEncoded(digest.SHA256, o.sha), fi.Size(), o.file)
		if err := r.pushBlob(ctx, d, func() (io.ReadCloser, error) { return st.OpenObject(o.sha) }, res); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", what, o.file, err)
		}
		layers = append(layers, d)
	}
	ann := cellAnnotations(tag, StateOK, recipe, m.Kernel, m.Driver, m.Version, m.Flavor)
	ann[AnnotationSetID] = id
	if err := r.sign(ann, st); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	rec, err := r.pushManifest(ctx, what, m.CacheKey, layers, ann, res)
	if err != nil {
		return nil, err
	}
	res.Record = rec
	return res, nil
}

// Failure describes a cell that failed to compile, for PushFailure.
type Failure struct {
	// Key is the cell's cache key.
	Key map[string]string
	// Recipe, Kernel, Driver, Version and Flavor name the cell.
	Recipe, Kernel, Driver, Version, Flavor string
	// FirstError is the first compiler error line.
	FirstError string
	// LogPath is the build log; its last MaxLogBytes are kept with the record.
	LogPath string
}

// MaxLogBytes is how much of a failed cell's build log (its end) a failure
// record keeps.
const MaxLogBytes = 256 << 10

// PushFailure records a failed cell under its key, unless the registry
// already holds a record (built or failed) for that key. It is tried again
// as PushSet is.
func (r *Remote) PushFailure(ctx context.Context, f Failure) (*PushResult, error) {
	ctx, end := r.bound(ctx)
	res, err := r.pushFailure(ctx, f)
	return res, end(err)
}

func (r *Remote) pushFailure(ctx context.Context, f Failure) (*PushResult, error) {
	var res *PushResult
	var err error
	for attempt := 1; ; attempt++ {
		res, err = r.pushFailureOnce(ctx, f)
		if err == nil || attempt == pushAttempts || ctx.Err() != nil {
			return res, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Duration(attempt) * 250 * time.Millisecond):
		}
	}
}

func (r *Remote) pushFailureOnce(ctx context.Context, f Failure) (*PushResult, error) {
	tag := manifest.KeyID(f.Key)
	what := fmt.Sprintf("record failure of %s for %s", f.Recipe, f.Kernel)
	if tag == "" {
		return nil, fmt.Errorf("%s: the cell has no cache key", what)
	}
	if rec, err := r.readRecord(ctx, tag); err == nil && r.keeps(rec) {
		return &PushResult{Record: rec}, nil
	} else if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	res := &PushResult{Pushed: true}
	var layers []ocispec.Descriptor
	if f.LogPath != "" {
		log, err := tail(f.LogPath, MaxLogBytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		d := descriptor(MediaTypeBuildLog, digest.FromBytes(log), int64(len(log)), "build.log")
		if err := r.pushBlob(ctx, d, func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(log)), nil }, res); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		layers = append(layers, d)
	}
	ann := cellAnnotations(tag, StateFailed, f.Recipe, f.Kernel, f.Driver, f.Version, f.Flavor)
	// Annotations are one-line strings for every tool that shows them.
	ann[AnnotationFirstErr] = strings.Join(strings.Fields(f.FirstError), " ")
	if err := r.sign(ann, nil); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	rec, err := r.pushManifest(ctx, what, f.Key, layers, ann, res)
	if err != nil {
		return nil, err
	}
	res.Record = rec
	return res, nil
}

// keeps reports whether a pusher leaves the cell rec alone rather than
// pushing its own: with trusted keys, when one of them signed it; when it
// signs, when its own key did; else always. A cell someone without the key
// put under this key, or one signed in the old format, is so replaced by
// the builders' signed push.
func (r *Remote) keeps(rec *Record) bool {
	t := r.trust
	if t == nil && r.signer != nil {
		t = r.signer.Trust()
	}
	if t == nil {
		return true
	}
	return rec.verify(t) == nil
}

// lastGeneration is the highest generation this process has signed.
var lastGeneration atomic.Uint64

// nextGeneration returns the generation of a cell signed now: the time in
// nanoseconds since 1970, raised above every generation this process signed
// and above the highest of the identity that st's cache (if any) has seen
// in any repository,
// so that it grows for each identity whichever builder signs, as far as
// the builders' clocks agree.
func nextGeneration(st *store.Store, id Identity) (uint64, error) {
	g := uint64(max(time.Now().UnixNano(), 0))
	if st != nil {
		m, err := loadSeen(st)
		if err != nil {
			return 0, err
		}
		for k, s := range m { // whichever repository it was seen in
			if k.id == id && s.Generation >= g {
				g = s.Generation + 1
			}
		}
	}
	for {
		last := lastGeneration.Load()
		if g <= last {
			g = last + 1
		}
		if lastGeneration.CompareAndSwap(last, g) {
			return g, nil
		}
	}
}

// sign adds the signer's statement of the cell ann describes and its
// signature to ann; st is the cache the cell comes from (nil for a failure
// record).
func (r *Remote) sign(ann map[string]string, st *store.Store) error {
	if r.signer == nil {
		return nil
	}
	s := cellsign.Statement{
		Key: ann[AnnotationKey], State: ann[AnnotationState],
		Subject: signedSubject(ann[AnnotationState], ann[AnnotationSetID], ann[AnnotationFirstErr]),
		Driver:  ann[AnnotationDriver], Version: ann[AnnotationVersion], Flavor: ann[AnnotationFlavor],
		Kernel: ann[AnnotationKernel], Recipe: ann[AnnotationRecipe], Created: ann[ocispec.AnnotationCreated],
	}
	var err error
	if s.Generation, err = nextGeneration(st, Identity{s.Driver, s.Version, s.Flavor, s.Kernel}); err != nil {
		return err
	}
	statement, sig, err := r.signer.Sign(s)
	if err != nil {
		return err
	}
	ann[AnnotationStatement], ann[AnnotationSigner], ann[AnnotationSignature] = string(statement), sig.KeyID, sig.Value
	return nil
}

// cellAnnotations are the annotations every cell manifest carries.
func cellAnnotations(tag, state, recipe, kernel, driver, version, flavor string) map[string]string {
	a := map[string]string{
		AnnotationKey:             tag,
		AnnotationState:           state,
		AnnotationKernel:          kernel,
		AnnotationDriver:          driver,
		AnnotationVersion:         version,
		ocispec.AnnotationCreated: time.Now().UTC().Format(time.RFC3339),
		ocispec.AnnotationTitle:   fmt.Sprintf("%s %s %s for %s", driver, version, flavor, kernel),
	}
	if recipe != "" {
		a[AnnotationRecipe] = recipe
	}
	if flavor != "" {
		a[AnnotationFlavor] = flavor
	}
	return a
}

// descriptor is a layer descriptor named title.
func descriptor(mediaType string, d digest.Digest, size int64, title string) ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: size, Annotations: map[string]string{ocispec.AnnotationTitle: title}}
}

// pushBlob uploads one blob unless the registry has it; the registry checks
// the digest of what it receives.
func (r *Remote) pushBlob(ctx context.Context, d ocispec.Descriptor, open func() (io.ReadCloser, error), res *PushResult) error {
	ok, err := r.repo.Exists(ctx, d)
	if err != nil {
		return fmt.Errorf("blob %s: %w", d.Digest, err)
	}
	if ok {
		return nil
	}
	rc, err := open()
	if err != nil {
		return err
	}
	defer rc.Close()
	if err := r.repo.Push(ctx, d, rc); err != nil {
		return fmt.Errorf("upload blob %s (%d bytes): %w", d.Digest, d.Size, err)
	}
	res.Blobs++
	res.Bytes += d.Size
	return nil
}

// pushManifest uploads the key as the config blob, then the manifest under
// its tag in one request: the tag appears complete or not at all.
func (r *Remote) pushManifest(ctx context.Context, what string, key map[string]string, layers []ocispec.Descriptor, ann map[string]string, res *PushResult) (*Record, error) {
	keyJSON, b, err := cellManifest(key, layers, ann)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	config := ocispec.Descriptor{MediaType: MediaTypeKey, Digest: digest.FromBytes(keyJSON), Size: int64(len(keyJSON))}
	if err := r.pushBlob(ctx, config, func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(keyJSON)), nil }, res); err != nil {
		return nil, fmt.Errorf("%s: key: %w", what, err)
	}
	r.stallBeforeManifest(ctx, what)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	d := content.NewDescriptorFromBytes(ocispec.MediaTypeImageManifest, b)
	tag := ann[AnnotationKey]
	if err := r.repo.PushReference(ctx, d, bytes.NewReader(b), tag); err != nil {
		return nil, fmt.Errorf("%s: manifest: %w", what, err)
	}
	res.Blobs++
	res.Bytes += d.Size
	rec, err := r.readRecord(ctx, tag)
	if err == nil && r.signer != nil {
		r.keeps(rec) // read the signed fields back (another pusher's cell may not verify)
	}
	return rec, err
}

// cellManifest returns a cell's key as its config blob and the artifact
// manifest naming it and layers, annotated with ann.
func cellManifest(key map[string]string, layers []ocispec.Descriptor, ann map[string]string) (keyJSON, manifestJSON []byte, err error) {
	keyJSON, err = json.Marshal(key) // sorted map keys: the bytes KeyID hashes
	if err != nil {
		return nil, nil, err
	}
	if layers == nil {
		layers = []ocispec.Descriptor{}
	}
	m := ocispec.Manifest{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: ArtifactType,
		Config:       ocispec.Descriptor{MediaType: MediaTypeKey, Digest: digest.FromBytes(keyJSON), Size: int64(len(keyJSON))},
		Layers:       layers,
		Annotations:  ann,
	}
	manifestJSON, err = json.Marshal(m)
	return keyJSON, manifestJSON, err
}

// tail returns the last n bytes of a file.
func tail(path string, n int64) ([]byte, error) {
	f, err := inroot.OpenPath(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > n {
		if _, err := f.Seek(fi.Size()-n, io.SeekStart); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(f)
}

// sortRecords orders records by cell, kernel, then newest first (Newer).
func sortRecords(recs []*Record) {
	slices.SortStableFunc(recs, func(a, b *Record) int {
		if c := strings.Compare(a.Cell(), b.Cell()); c != 0 {
			return c
		}
		if c := strings.Compare(a.Kernel, b.Kernel); c != 0 {
			return c
		}
		switch {
		case Newer(a, b):
			return -1
		case Newer(b, a):
			return 1
		}
		return 0
	})
}
