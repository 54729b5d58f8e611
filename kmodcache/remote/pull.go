package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

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

// Pull fetches the cell tagged with key's id and adds its set to st
// (replacing a set of the same kernel, driver, version and flavour built
// from other inputs). Every blob is verified against its descriptor while it
// downloads and against the set manifest when the store adds it; nothing
// enters st unless all of it verified. A key the registry lacks wraps
// ErrNotFound; a recorded failure wraps ErrFailedCell.
func (r *Remote) Pull(ctx context.Context, st *store.Store, key map[string]string) (*PullResult, error) {
	rec, err := r.Lookup(ctx, key)
	if err != nil {
		return nil, err
	}
	return r.PullRecord(ctx, st, rec)
}

// PullRecord is Pull for a record from Lookup or List.
func (r *Remote) PullRecord(ctx context.Context, st *store.Store, rec *Record) (*PullResult, error) {
	what := fmt.Sprintf("pull %s from %s", rec.describe(), r.url)
	if rec.State == StateFailed {
		return nil, fmt.Errorf("%s: %w: %s", what, ErrFailedCell, rec.FirstError)
	}
	res := &PullResult{Record: rec}
	m := rec.manifest
	keyJSON, err := fetchAll(ctx, r.repo, m.Config, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("%s: key: %w", what, err)
	}
	res.Bytes += int64(len(keyJSON))
	var setDesc *ocispec.Descriptor
	byDigest := map[string]ocispec.Descriptor{}
	for i, l := range m.Layers {
		switch l.MediaType {
		case MediaTypeSet:
			setDesc = &m.Layers[i]
		case MediaTypeModule, MediaTypeGPUs:
			byDigest[l.Digest.Encoded()] = l
		}
	}
	if setDesc == nil {
		return nil, fmt.Errorf("%s: the artifact has no set manifest layer (%s)", what, MediaTypeSet)
	}
	setJSON, err := fetchAll(ctx, r.repo, *setDesc, 16<<20)
	if err != nil {
		return nil, fmt.Errorf("%s: set manifest: %w", what, err)
	}
	res.Bytes += int64(len(setJSON))
	set, err := manifest.Unmarshal(setJSON)
	if err != nil {
		return nil, fmt.Errorf("%s: set manifest: %w", what, err)
	}
	if got := manifest.KeyID(set.CacheKey); got != rec.Tag {
		return nil, fmt.Errorf("%s: the set inside was built from key %s, not the tag's", what, short(got))
	}
	var key map[string]string
	if err := json.Unmarshal(keyJSON, &key); err != nil {
		return nil, fmt.Errorf("%s: key: %w", what, err)
	}
	if kid := manifest.KeyID(key); kid != rec.Tag {
		return nil, fmt.Errorf("%s: the artifact's key is %s, not the tag", what, short(kid))
	}

	tmp, err := os.MkdirTemp("", "kpreload-pull-")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer os.RemoveAll(tmp)
	files := map[string]string{}
	need := func(file, sha string) error {
		l, ok := byDigest[sha]
		if !ok {
			return fmt.Errorf("%s: the artifact lacks layer sha256:%s (%s)", what, sha, file)
		}
		dst := filepath.Join(tmp, fmt.Sprintf("%03d-%s", len(files), filepath.Base(file)))
		n, err := fetchFile(ctx, r.repo, l, dst)
		if err != nil {
			return fmt.Errorf("%s: layer %s (%s): %w", what, file, l.Digest, err)
		}
		res.Bytes += n
		files[file] = dst
		return nil
	}
	for _, mod := range set.Modules {
		if err := need(mod.File, mod.SHA256); err != nil {
			return nil, err
		}
	}
	if f := set.SupportedGPUs; f != nil {
		if err := need(f.File, f.SHA256); err != nil {
			return nil, err
		}
	}
	id, err := st.Add(ctx, set, files, true)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	res.SetID = id
	return res, nil
}

// fetcher is what pulls read from (the repository).
type fetcher interface {
	Fetch(ctx context.Context, target ocispec.Descriptor) (io.ReadCloser, error)
}

// fetchAll reads a small blob (at most limit bytes), verifying its size and digest.
func fetchAll(ctx context.Context, f fetcher, d ocispec.Descriptor, limit int64) ([]byte, error) {
	if d.Size < 0 || d.Size > limit {
		return nil, fmt.Errorf("%s: size %d outside 0..%d", d.Digest, d.Size, limit)
	}
	rc, err := f.Fetch(ctx, d)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return content.ReadAll(rc, d)
}

// fetchFile downloads a blob to path, verifying its size and digest.
func fetchFile(ctx context.Context, f fetcher, d ocispec.Descriptor, path string) (int64, error) {
	rc, err := f.Fetch(ctx, d)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	out, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer out.Close()
	vr := content.NewVerifyReader(rc, d)
	n, err := io.Copy(out, vr)
	if err != nil {
		return n, fmt.Errorf("download: %w", err)
	}
	if err := vr.Verify(); err != nil {
		return n, fmt.Errorf("refused, the registry's copy does not match its digest: %w", err)
	}
	return n, out.Close()
}
