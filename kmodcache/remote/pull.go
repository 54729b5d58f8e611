package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// ErrFailedCell is wrapped by Pull's error when the registry records the
// cell as failed to compile.
var ErrFailedCell = errors.New("the registry records this cell as failed")

// PullResult says what a pull did.
type PullResult struct {
	// Record is the pulled cell's record.
	Record *Record
	// SetID is the set's id in the local cache.
	SetID string
	// Bytes is what was downloaded.
	Bytes int64
}

// Pull fetches the cell tagged with key's id and adds its set to st. A set
// of the same kernel, driver, version and flavour already in st (built from
// other inputs, or built here) is replaced only with replace; without it
// the pull is refused and st keeps its set. Every blob is verified against its descriptor while it
// downloads and against the set manifest when the store adds it; nothing
// enters st unless all of it verified. A key the registry lacks wraps
// ErrNotFound; a recorded failure wraps ErrFailedCell.
func (r *Remote) Pull(ctx context.Context, st *store.Store, key map[string]string, replace bool) (*PullResult, error) {
	ctx, end := r.bound(ctx)
	rec, err := r.lookup(ctx, key)
	if err != nil {
		return nil, end(err)
	}
	res, err := r.pullRecord(ctx, st, rec, replace)
	return res, end(err)
}

// PullRecord is Pull for a record from Lookup or List.
func (r *Remote) PullRecord(ctx context.Context, st *store.Store, rec *Record, replace bool) (*PullResult, error) {
	ctx, end := r.bound(ctx)
	res, err := r.pullRecord(ctx, st, rec, replace)
	return res, end(err)
}

func (r *Remote) pullRecord(ctx context.Context, st *store.Store, rec *Record, replace bool) (*PullResult, error) {
	what := fmt.Sprintf("pull %s from %s", rec.describe(), r.url)
	if rec.State == StateFailed {
		return nil, fmt.Errorf("%s: %w: %s", what, ErrFailedCell, rec.FirstError)
	}
	if err := r.CheckSeen(st, rec); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	res := &PullResult{Record: rec}
	m := rec.manifest
	keyJSON, err := fetchAll(ctx, r.repo, m.Config, maxKeyBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: key %s: %w", what, m.Config.Digest, err)
	}
	res.Bytes += int64(len(keyJSON))
	setDesc, err := setLayer(m)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	setJSON, err := fetchAll(ctx, r.repo, setDesc, maxSetBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: set manifest %s: %w", what, setDesc.Digest, err)
	}
	res.Bytes += int64(len(setJSON))
	plan, err := planPull(rec, keyJSON, setJSON)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}

	tmp, err := st.TempDir(ctx, "pull")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer tmp.Remove()
	files := map[string]string{}
	for _, b := range plan.blobs {
		out, dst, err := tmp.Create(b.desc.Digest.Encoded())
		if err != nil {
			return nil, fmt.Errorf("%s: layer %s (%s): %w", what, b.name(), b.desc.Digest, err)
		}
		n, err := fetchFile(ctx, r.repo, b.desc, out)
		if err != nil {
			return nil, fmt.Errorf("%s: layer %s (%s): %w", what, b.name(), b.desc.Digest, err)
		}
		res.Bytes += n
		for _, f := range b.files {
			files[f] = dst
		}
	}
	id, err := st.Add(ctx, plan.set, files, replace)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	res.SetID = id
	if rec.Trust == TrustVerified {
		if err := withSeen(st, func(m map[seenKey]seen) (bool, error) { return r.remember(m, rec), nil }); err != nil {
			return nil, fmt.Errorf("%s: set %s added, but: %w", what, short(id), err)
		}
	}
	if err := tmp.Remove(); err != nil {
		return nil, fmt.Errorf("%s: set %s added, but: %w", what, short(id), err)
	}
	return res, nil
}

// setLayer returns the one set manifest layer of a cell's manifest.
func setLayer(m ocispec.Manifest) (ocispec.Descriptor, error) {
	var found []ocispec.Descriptor
	for _, l := range m.Layers {
		if l.MediaType == MediaTypeSet {
			found = append(found, l)
		}
	}
	if len(found) != 1 {
		return ocispec.Descriptor{}, fmt.Errorf("the artifact has %d set manifest layers (%s), want 1", len(found), MediaTypeSet)
	}
	return found[0], nil
}

// pullPlan is what a pull downloads: the set and its distinct blobs.
type pullPlan struct {
	set   *manifest.Manifest
	blobs []*planBlob
}

// planBlob is one blob to download and the files of the set that are it.
type planBlob struct {
	desc  ocispec.Descriptor
	files []string
}

// name names the blob by its first file (and how many more share it).
func (b *planBlob) name() string {
	if len(b.files) > 1 {
		return fmt.Sprintf("%s and %d more", b.files[0], len(b.files)-1)
	}
	return b.files[0]
}

// planPull checks what the registry sent for rec (its key, its set manifest)
// against the record and its layers: the key is the tag's, the set is valid,
// was built from that key and is the set the record names, and every file of
// the set is a layer of the size the set declares. It returns the blobs to
// download, each once however many files share it.
func planPull(rec *Record, keyJSON, setJSON []byte) (*pullPlan, error) {
	var key map[string]string
	if err := json.Unmarshal(keyJSON, &key); err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	if kid := manifest.KeyID(key); kid != rec.Tag {
		return nil, fmt.Errorf("the artifact's key is %s, not the tag", short(kid))
	}
	set, err := manifest.Unmarshal(setJSON)
	if err != nil {
		return nil, fmt.Errorf("set manifest: %w", err)
	}
	if got := manifest.KeyID(set.CacheKey); got != rec.Tag {
		return nil, fmt.Errorf("the set inside was built from key %s, not the tag's", short(got))
	}
	if err := set.Validate(); err != nil {
		return nil, fmt.Errorf("set manifest: %w", err)
	}
	if id := manifest.IDOf(setJSON); id != rec.SetID {
		return nil, fmt.Errorf("the set manifest's id is %s, the record names set %s", short(id), short(rec.SetID))
	}
	if got, want := [4]string{set.Kernel, set.Driver, set.Version, set.Flavor}, [4]string{rec.Kernel, rec.Driver, rec.Version, rec.Flavor}; got != want {
		return nil, fmt.Errorf("the set is %q for %s, the record says %q for %s", strings.TrimSpace(set.Driver+" "+set.Version+" "+set.Flavor), set.Kernel,
			strings.TrimSpace(rec.Driver+" "+rec.Version+" "+rec.Flavor), rec.Kernel)
	}
	layers := map[string]ocispec.Descriptor{}
	for _, l := range rec.manifest.Layers {
		if l.MediaType == MediaTypeModule || l.MediaType == MediaTypeGPUs {
			layers[l.Digest.Encoded()] = l
		}
	}
	// One file is one module (its name is inside it): entries sharing a
	// layer are a forgery, refused before anything is downloaded.
	first := map[string]string{}
	for _, mod := range set.Modules {
		if f, dup := first[mod.SHA256]; dup {
			n := 0
			for _, m := range set.Modules {
				if m.SHA256 == mod.SHA256 {
					n++
				}
			}
			return nil, fmt.Errorf("%d module entries (%s, %s, ...) name one layer, sha256:%s: one file is one module", n, f, mod.File, mod.SHA256)
		}
		first[mod.SHA256] = mod.File
	}
	plan := &pullPlan{set: set}
	byDigest := map[string]*planBlob{} // each blob once, whatever the set says
	need := func(file, sha string, size int64) error {
		l, ok := layers[sha]
		if !ok {
			return fmt.Errorf("the artifact lacks layer sha256:%s (%s)", sha, file)
		}
		if l.Size != size {
			return fmt.Errorf("layer %s (%s) is %d bytes, the set manifest says %d", file, l.Digest, l.Size, size)
		}
		b := byDigest[sha]
		if b == nil {
			b = &planBlob{desc: l}
			byDigest[sha] = b
			plan.blobs = append(plan.blobs, b)
		}
		b.files = append(b.files, file)
		return nil
	}
	for _, mod := range set.Modules {
		if err := need(mod.File, mod.SHA256, mod.Size); err != nil {
			return nil, err
		}
	}
	if f := set.SupportedGPUs; f != nil {
		if err := need(f.File, f.SHA256, f.Size); err != nil {
			return nil, err
		}
	}
	return plan, nil
}

// fetcher is what pulls read from (the repository).
type fetcher interface {
	Fetch(ctx context.Context, target ocispec.Descriptor) (io.ReadCloser, error)
}

// fetchAll reads a small blob (at most limit bytes), verifying its size and
// digest: no more than its descriptor's size is read.
func fetchAll(ctx context.Context, f fetcher, d ocispec.Descriptor, limit int64) ([]byte, error) {
	if d.Size < 0 || d.Size > limit {
		return nil, fmt.Errorf("refused: declared size %d outside 0..%d", d.Size, limit)
	}
	rc, err := f.Fetch(ctx, d)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	vr := content.NewVerifyReader(rc, d)
	var buf bytes.Buffer
	n, err := buf.ReadFrom(vr)
	if err == nil {
		err = vr.Verify()
	}
	if err != nil {
		return nil, readError(err, d, n)
	}
	return buf.Bytes(), nil
}

// fetchFile downloads a blob into out (a new file, closed on return),
// verifying its size and digest: no more than its descriptor's size is read.
func fetchFile(ctx context.Context, f fetcher, d ocispec.Descriptor, out *os.File) (int64, error) {
	defer out.Close()
	rc, err := f.Fetch(ctx, d)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	vr := content.NewVerifyReader(rc, d)
	n, err := io.Copy(out, vr)
	if err == nil {
		err = vr.Verify()
	}
	if err != nil {
		return n, readError(err, d, n)
	}
	return n, out.Close()
}

// readError explains why reading blob d failed after n bytes.
func readError(err error, d ocispec.Descriptor, n int64) error {
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("refused: the registry sent %d bytes, fewer than the %d its descriptor declares: %w", n, d.Size, err)
	case errors.Is(err, content.ErrTrailingData):
		return fmt.Errorf("refused: the registry sent more than the %d bytes its descriptor declares: %w", d.Size, err)
	case errors.Is(err, content.ErrMismatchedDigest):
		return fmt.Errorf("refused, the registry's copy does not match its digest: %w", err)
	}
	return fmt.Errorf("download: %w", err)
}
