package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/manifest"
)

// Kinds of Problem.
const (
	// ProblemBadManifest: a manifest that cannot be read, does not hash to its
	// name, is not canonical or does not validate.
	ProblemBadManifest = "bad-manifest"
	// ProblemMissingObject: a module file a manifest references is absent.
	ProblemMissingObject = "missing-object"
	// ProblemCorruptObject: a module file's bytes do not match its digest or size.
	ProblemCorruptObject = "corrupt-object"
	// ProblemStaleIndex: a boot index differs from what the manifests say
	// (missing, outdated, or left for a kernel without sets). A writer killed
	// between manifest and index leaves one; Repair or the next writer fixes it.
	ProblemStaleIndex = "stale-index"
	// ProblemBadIndex: a boot index that cannot be read.
	ProblemBadIndex = "bad-index"
	// ProblemDanglingKey: a cache key that points at a set the cache lacks.
	ProblemDanglingKey = "dangling-key"
	// ProblemMetadataMismatch: a manifest says of its modules what their
	// files do not say of themselves (aliases, srcversion, signature ...).
	ProblemMetadataMismatch = "metadata-mismatch"
)

// Problem is one thing Verify found wrong.
type Problem struct {
	Kind string `json:"kind"`
	// Path is the file concerned.
	Path string `json:"path"`
	// Sets and Modules name the sets and modules that reference the file, if any.
	Sets    []string `json:"sets,omitempty"`
	Modules []string `json:"modules,omitempty"`
	Detail  string   `json:"detail"`
}

// String describes the problem on one line.
func (p Problem) String() string {
	var refs []string
	for _, id := range p.Sets {
		refs = append(refs, "set "+short(id))
	}
	if len(p.Modules) > 0 {
		refs = append(refs, "module "+strings.Join(p.Modules, ", "))
	}
	s := p.Kind + " " + p.Path
	if len(refs) > 0 {
		s += " (" + strings.Join(refs, "; ") + ")"
	}
	return s + ": " + p.Detail
}

// short abbreviates a set id for messages.
func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// objectRef is an object with the sets and modules that use it.
type objectRef struct {
	sha  string
	size int64
	sets []string
	mods []string
}

// Verify re-hashes every object every manifest references and checks each
// manifest, each boot index against the manifests and each cache key. It
// returns the problems found (none for a healthy cache); err is for failures
// to read the cache at all. Verify takes no lock: run while a writer is
// active, it may report that writer's not yet rewritten index as stale.
func (s *Store) Verify(ctx context.Context) ([]Problem, error) {
	var probs []Problem
	good, bad, err := s.scan()
	if err != nil {
		return nil, err
	}
	for _, b := range bad {
		probs = append(probs, Problem{Kind: ProblemBadManifest, Path: b.path, Sets: []string{b.id}, Detail: b.err.Error()})
	}

	// Each object once, with every set and module that uses it.
	refs := map[string]*objectRef{}
	var order []string
	ref := func(id, sha string, size int64, name string) {
		r := refs[sha]
		if r == nil {
			r = &objectRef{sha: sha, size: size}
			refs[sha] = r
			order = append(order, sha)
		}
		if !slices.Contains(r.sets, id) {
			r.sets = append(r.sets, id)
		}
		if !slices.Contains(r.mods, name) {
			r.mods = append(r.mods, name)
		}
	}
	for _, st := range good {
		for _, mod := range st.m.Modules {
			ref(st.id, mod.SHA256, mod.Size, mod.Name)
		}
		if f := st.m.SupportedGPUs; f != nil {
			ref(st.id, f.SHA256, f.Size, f.File)
		}
	}
	slices.Sort(order)
	for _, sha := range order {
		if err := ctx.Err(); err != nil {
			return probs, fmt.Errorf("verify: %w", err)
		}
		r := refs[sha]
		path := s.ObjectPath(sha)
		got, n, err := s.hashObject(sha)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			probs = append(probs, Problem{Kind: ProblemMissingObject, Path: path, Sets: r.sets, Modules: r.mods, Detail: "object is missing"})
		case err != nil:
			probs = append(probs, Problem{Kind: ProblemCorruptObject, Path: path, Sets: r.sets, Modules: r.mods, Detail: err.Error()})
		case got != sha:
			probs = append(probs, Problem{Kind: ProblemCorruptObject, Path: path, Sets: r.sets, Modules: r.mods, Detail: fmt.Sprintf("sha256 is %s (%d bytes), want %s (%d bytes)", got, n, sha, r.size)})
		case n != r.size:
			probs = append(probs, Problem{Kind: ProblemCorruptObject, Path: path, Sets: r.sets, Modules: r.mods, Detail: fmt.Sprintf("size is %d bytes, manifest says %d", n, r.size)})
		}
	}

	// What each intact set says of its modules, read again from them.
	for _, st := range good {
		if err := ctx.Err(); err != nil {
			return probs, fmt.Errorf("verify: %w", err)
		}
		intact := true
		for _, mod := range st.m.Modules {
			if r := refs[mod.SHA256]; slices.ContainsFunc(probs, func(p Problem) bool { return p.Path == s.ObjectPath(r.sha) }) {
				intact = false
			}
		}
		if !intact {
			continue // its missing or corrupt objects are reported already
		}
		if err := checkDerived(st.m, func(mod manifest.Module) (*os.File, error) { return s.OpenObject(mod.SHA256) }); err != nil {
			probs = append(probs, Problem{Kind: ProblemMetadataMismatch, Path: s.ManifestPath(st.id), Sets: []string{st.id}, Detail: err.Error()})
		}
	}

	ip, err := s.verifyIndexes(good)
	if err != nil {
		return probs, err
	}
	probs = append(probs, ip...)

	kp, err := s.verifyKeys(good, bad)
	if err != nil {
		return probs, err
	}
	return append(probs, kp...), nil
}

// verifyIndexes compares every boot index on disk with the one the manifests give.
func (s *Store) verifyIndexes(good []set) ([]Problem, error) {
	kernels, err := s.allKernels(good)
	if err != nil {
		return nil, err
	}
	var probs []Problem
	for _, k := range kernels {
		path := s.IndexPath(k)
		want := buildIndex(k, good)
		old, err := inroot.ReadFile(s.root, s.indexName(k), MaxRecord)
		if errors.Is(err, fs.ErrNotExist) {
			if len(want.Sets) > 0 {
				probs = append(probs, Problem{Kind: ProblemStaleIndex, Path: path, Sets: setIDsOf(want), Detail: fmt.Sprintf("no boot index for kernel %s, which has %d set(s)", k, len(want.Sets))})
			}
			continue
		}
		if err != nil {
			probs = append(probs, Problem{Kind: ProblemBadIndex, Path: path, Detail: err.Error()})
			continue
		}
		if _, err := bootindex.Parse(path, old); err != nil {
			probs = append(probs, Problem{Kind: ProblemBadIndex, Path: path, Detail: err.Error()})
			continue
		}
		if len(want.Sets) == 0 {
			probs = append(probs, Problem{Kind: ProblemStaleIndex, Path: path, Detail: fmt.Sprintf("boot index for kernel %s, which has no sets", k)})
			continue
		}
		b, err := bootindex.Marshal(want)
		if err != nil {
			return probs, err
		}
		if !bytes.Equal(old, b) {
			probs = append(probs, Problem{Kind: ProblemStaleIndex, Path: path, Sets: setIDsOf(want), Detail: fmt.Sprintf("boot index for kernel %s differs from its manifests", k)})
		}
	}
	return probs, nil
}

// setIDsOf lists the set ids of an index.
func setIDsOf(ix *bootindex.Index) []string {
	ids := make([]string, len(ix.Sets))
	for i, st := range ix.Sets {
		ids[i] = st.ID
	}
	return ids
}

// verifyKeys reports cache keys that point at sets the cache lacks.
func (s *Store) verifyKeys(good []set, bad []badManifest) ([]Problem, error) {
	have := map[string]bool{}
	for _, st := range good {
		have[st.id] = true
	}
	for _, b := range bad {
		have[b.id] = true // reported already
	}
	dir := s.name(keysDir)
	ents, err := inroot.ReadDir(s.root, dir)
	if err != nil {
		return nil, fmt.Errorf("verify cache keys: %w", err)
	}
	var probs []Problem
	for _, e := range ents {
		if isTemp(e.Name()) {
			continue
		}
		path := s.host(s.keyName(e.Name()))
		b, err := inroot.ReadFile(s.root, s.keyName(e.Name()), MaxRecord)
		if err != nil {
			probs = append(probs, Problem{Kind: ProblemDanglingKey, Path: path, Detail: err.Error()})
			continue
		}
		id := strings.TrimSpace(string(b))
		if !have[id] {
			probs = append(probs, Problem{Kind: ProblemDanglingKey, Path: path, Detail: fmt.Sprintf("points at set %q, which the cache lacks", id)})
		}
	}
	return probs, nil
}

// Repaired lists what Repair changed.
type Repaired struct {
	// TempFiles are temporary files of interrupted writers, removed.
	TempFiles []string `json:"temp_files,omitempty"`
	// Indexes are boot indexes rewritten or removed to match the manifests.
	Indexes []string `json:"indexes,omitempty"`
	// Keys are cache keys removed because their set is gone.
	Keys []string `json:"keys,omitempty"`
	// Objects are objects no manifest references, removed.
	Objects []string `json:"objects,omitempty"`
}

// Repair cleans up what interrupted writers leave behind, under the writer
// lock: temporary files, stale boot indexes, dangling cache keys and objects
// no manifest references. It never deletes a manifest or an object a manifest
// references: a corrupt or missing object is fixed by adding its set again.
func (s *Store) Repair(ctx context.Context) (*Repaired, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return nil, fmt.Errorf("repair: %w", err)
	}
	defer unlock()
	r := &Repaired{}
	if r.TempFiles, err = s.removeTemps(); err != nil {
		return r, fmt.Errorf("repair: %w", err)
	}
	if r.Indexes, err = s.syncIndexes(); err != nil {
		return r, fmt.Errorf("repair: %w", err)
	}
	good, bad, err := s.scan()
	if err != nil {
		return r, fmt.Errorf("repair: %w", err)
	}
	kp, err := s.verifyKeys(good, bad)
	if err != nil {
		return r, fmt.Errorf("repair: %w", err)
	}
	for _, p := range kp {
		if err := inroot.Remove(s.root, s.keyName(filepath.Base(p.Path))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return r, fmt.Errorf("repair: %w", err)
		}
		r.Keys = append(r.Keys, p.Path)
	}
	if len(kp) > 0 {
		if err := inroot.SyncDir(s.root, s.name(keysDir)); err != nil {
			return r, fmt.Errorf("repair: %w", err)
		}
	}
	if r.Objects, err = s.collectGarbage(); err != nil {
		return r, fmt.Errorf("repair: %w", err)
	}
	return r, nil
}
