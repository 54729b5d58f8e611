package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/names"
)

// Entry summarizes one set of the cache.
type Entry struct {
	ID      string `json:"id"`
	Kernel  string `json:"kernel"`
	Driver  string `json:"driver"`
	Version string `json:"version"`
	Flavor  string `json:"flavor,omitempty"`
	// Modules is the number of module files in the set.
	Modules int `json:"modules"`
	// Size is the total size of the set's files as stored, in bytes.
	Size int64 `json:"size"`
}

// set is a manifest read from the cache with its id.
type set struct {
	id string
	m  *manifest.Manifest
}

// badManifest is a file in sets/ that is not a readable, valid, canonical manifest.
type badManifest struct {
	path string
	id   string
	err  error
}

// setIDs lists the ids of the manifests in sets/, sorted; temporary files and
// other names are ignored.
func (s *Store) setIDs() ([]string, error) {
	ents, err := inroot.ReadDir(s.root, s.name(setsDir))
	if err != nil {
		return nil, fmt.Errorf("list module sets: %w", err)
	}
	var ids []string
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if ok && manifest.IsDigest(id) && e.Type().IsRegular() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// readManifest reads the manifest of set id and checks that its bytes hash to
// id, that it is canonical and that it validates.
func (s *Store) readManifest(id string) (*manifest.Manifest, error) {
	path := s.ManifestPath(id)
	b, err := inroot.ReadFile(s.root, s.manifestName(id), MaxRecord)
	if err != nil {
		return nil, fmt.Errorf("set %s: %w", id, err)
	}
	if got := manifest.IDOf(b); got != id {
		return nil, fmt.Errorf("set %s: manifest %s is corrupt: its sha256 is %s", id, path, got)
	}
	m, err := manifest.Unmarshal(b)
	if err != nil {
		return nil, fmt.Errorf("set %s: %s: %w", id, path, err)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("set %s: %w", id, err)
	}
	canon, err := manifest.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("set %s: %w", id, err)
	}
	if !bytes.Equal(canon, b) {
		return nil, fmt.Errorf("set %s: manifest %s is not in canonical form", id, path)
	}
	return m, nil
}

// scan reads every manifest of the cache: the good ones, sorted by kernel,
// driver, version, flavor and id, and the bad ones. err is for failures to
// read the directory itself.
func (s *Store) scan() (good []set, bad []badManifest, err error) {
	ids, err := s.setIDs()
	if err != nil {
		return nil, nil, err
	}
	for _, id := range ids {
		m, err := s.readManifest(id)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed since the listing
			}
			bad = append(bad, badManifest{path: s.ManifestPath(id), id: id, err: err})
			continue
		}
		good = append(good, set{id: id, m: m})
	}
	slices.SortFunc(good, func(a, b set) int {
		for _, c := range [][2]string{{a.m.Kernel, b.m.Kernel}, {a.m.Driver, b.m.Driver}, {a.m.Version, b.m.Version}, {a.m.Flavor, b.m.Flavor}, {a.id, b.id}} {
			if r := strings.Compare(c[0], c[1]); r != 0 {
				return r
			}
		}
		return 0
	})
	return good, bad, nil
}

// badError turns unreadable manifests into one error, or nil.
func badError(bad []badManifest) error {
	if len(bad) == 0 {
		return nil
	}
	errs := make([]error, len(bad))
	for i, b := range bad {
		errs[i] = b.err
	}
	return fmt.Errorf("%d unreadable manifest(s) (run kpreload cache verify): %w", len(bad), errors.Join(errs...))
}

// List returns a summary of every set in the cache, sorted by kernel, driver,
// version, flavor and id. If some manifests cannot be read or are invalid it
// returns the others and an error naming them.
func (s *Store) List() ([]Entry, error) {
	good, bad, err := s.scan()
	if err != nil {
		return nil, err
	}
	entries := make([]Entry, 0, len(good))
	for _, st := range good {
		e := Entry{ID: st.id, Kernel: st.m.Kernel, Driver: st.m.Driver, Version: st.m.Version, Flavor: st.m.Flavor, Modules: len(st.m.Modules)}
		for _, mod := range st.m.Modules {
			e.Size += mod.Size
		}
		entries = append(entries, e)
	}
	return entries, badError(bad)
}

// Get returns the manifest of set id (the full 64-digit id; see Resolve),
// checked against its id.
func (s *Store) Get(id string) (*manifest.Manifest, error) {
	if !manifest.IsDigest(id) {
		return nil, fmt.Errorf("set %q: not a set id (64 lowercase hex digits)", id)
	}
	return s.readManifest(id)
}

// Resolve returns the full id of the one set whose id starts with prefix.
func (s *Store) Resolve(prefix string) (string, error) {
	if prefix == "" {
		return "", fmt.Errorf("resolve set: empty id")
	}
	ids, err := s.setIDs()
	if err != nil {
		return "", err
	}
	var found []string
	for _, id := range ids {
		if strings.HasPrefix(id, prefix) {
			found = append(found, id)
		}
	}
	return onlyOne("resolve set", prefix, "no such set", found)
}

// onlyOne returns the one id of found, or an error saying (what, prefix)
// that none matched (wrapping fs.ErrNotExist) or that several did.
func onlyOne(what, prefix, none string, found []string) (string, error) {
	switch len(found) {
	case 0:
		return "", fmt.Errorf("%s %q: %s: %w", what, prefix, none, fs.ErrNotExist)
	case 1:
		return found[0], nil
	default:
		return "", fmt.Errorf("%s %q: ambiguous, matches %d sets", what, prefix, len(found))
	}
}

// Lookup returns the id of the set built from cacheKey, if the cache holds it
// (its key is recorded and its manifest is present and valid).
func (s *Store) Lookup(cacheKey map[string]string) (id string, ok bool, err error) {
	kid := manifest.KeyID(cacheKey)
	if kid == "" {
		return "", false, nil
	}
	b, err := inroot.ReadFile(s.root, s.keyName(kid), MaxRecord)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("look up cache key: %w", err)
	}
	id = strings.TrimSpace(string(b))
	if !manifest.IsDigest(id) {
		return "", false, fmt.Errorf("look up cache key: %s holds %q, not a set id", s.keyPath(kid), id)
	}
	m, err := s.readManifest(id)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("look up cache key: %w", err)
	}
	if manifest.KeyID(m.CacheKey) != kid {
		return "", false, fmt.Errorf("look up cache key: %s points at set %s, which was built from another key", s.keyPath(kid), id)
	}
	return id, true, nil
}

// Kernels returns the kernel releases the cache holds sets for, sorted.
func (s *Store) Kernels() ([]string, error) {
	good, bad, err := s.scan()
	if err != nil {
		return nil, err
	}
	var ks []string
	for _, st := range good {
		ks = append(ks, st.m.Kernel)
	}
	slices.Sort(ks)
	return slices.Compact(ks), badError(bad)
}

// Index reads the boot index stored for kernel, the file /init reads; a
// kernel that is not a name (kmodcache/names) is refused before it becomes
// a path.
func (s *Store) Index(kernel string) (*bootindex.Index, error) {
	if err := names.Check("kernel release", kernel); err != nil {
		return nil, fmt.Errorf("boot index: %w", err)
	}
	ix, err := bootindex.ReadIn(s.root, s.indexName(kernel))
	if err != nil {
		return nil, err
	}
	if ix.Kernel != kernel {
		return nil, fmt.Errorf("boot index %s: kernel %q, want %q", s.IndexPath(kernel), ix.Kernel, kernel)
	}
	return ix, nil
}

// BuildIndex computes the boot index of kernel from the manifests, the index
// every writer stores. It has no sets when the cache has none for kernel.
func (s *Store) BuildIndex(kernel string) (*bootindex.Index, error) {
	good, bad, err := s.scan()
	if err != nil {
		return nil, err
	}
	return buildIndex(kernel, good), badError(bad)
}

// buildIndex makes the boot index of kernel from sets (in scan order).
func buildIndex(kernel string, sets []set) *bootindex.Index {
	ix := &bootindex.Index{Format: bootindex.FormatVersion, Kernel: kernel, Sets: []bootindex.Set{}}
	for _, st := range sets {
		if st.m.Kernel != kernel {
			continue
		}
		bs := bootindex.Set{
			ID:       st.id,
			Driver:   st.m.Driver,
			Version:  st.m.Version,
			Flavor:   st.m.Flavor,
			Dir:      IndexSetDir,
			Firmware: slices.Clone(st.m.Firmware),
		}
		if f := st.m.SupportedGPUs; f != nil {
			bs.SupportedGPUs = objectRel(f.SHA256)
		}
		for _, mod := range st.m.Modules {
			bs.Modules = append(bs.Modules, bootindex.Module{
				Name:        mod.Name,
				Path:        objectRel(mod.SHA256),
				SHA256:      mod.SHA256,
				Size:        mod.Size,
				Verity:      mod.Verity,
				Compression: mod.Compression,
				Vermagic:    mod.Vermagic,
				Aliases:     slices.Clone(mod.Aliases),
				Depends:     slices.Clone(mod.Depends),
				SoftPre:     mod.SoftPre(),
				SoftPost:    mod.SoftPost(),
				Firmware:    slices.Clone(mod.Firmware),
				Unsigned:    !mod.Signed,
				Signer:      mod.Signer,
				SigKey:      mod.SigKey,
			})
		}
		ix.Sets = append(ix.Sets, bs)
	}
	return ix
}

// CopySet adds set id of s, with its module files and supported-gpus.json,
// to the cache dst (as Add, never replacing another set) and returns the id,
// which is the same in both caches. It makes a small cache of chosen sets,
// such as the one an image or a test root disk carries.
func (s *Store) CopySet(ctx context.Context, dst *Store, id string) (string, error) {
	m, err := s.Get(id)
	if err != nil {
		return "", fmt.Errorf("copy set: %w", err)
	}
	files := map[string]string{}
	for _, mod := range m.Modules {
		files[mod.File] = mod.SHA256
	}
	if f := m.SupportedGPUs; f != nil {
		files[f.File] = f.SHA256
	}
	got, err := dst.add(ctx, m, files, s.OpenObject, false, true)
	if err != nil {
		return "", fmt.Errorf("copy set %s to %s: %w", short(id), dst.Dir(), err)
	}
	return got, nil
}

// ResolveKey returns the id of the one set whose cache key's digest
// (manifest.KeyID, the name under keys/) starts with prefix.
func (s *Store) ResolveKey(prefix string) (string, error) {
	if prefix == "" {
		return "", fmt.Errorf("resolve cache key: empty key")
	}
	good, _, err := s.scan()
	if err != nil {
		return "", err
	}
	var found []string
	for _, st := range good {
		if kid := manifest.KeyID(st.m.CacheKey); kid != "" && strings.HasPrefix(kid, prefix) {
			found = append(found, st.id)
		}
	}
	return onlyOne("resolve cache key", prefix, "no set has that key", found)
}
