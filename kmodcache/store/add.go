package store

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/modinfo"
	"github.com/kpreload/kpreload/kmodcache/modname"
)

// AddRequest describes a set of module files to add to the cache.
type AddRequest struct {
	// Driver, Version and Flavor name the driver the modules belong to.
	Driver, Version, Flavor string
	// Files are the module files (.ko, .ko.xz, .ko.zst, .ko.gz); their base
	// names must differ.
	Files []string
	// CacheKey holds the build inputs the set was made from; Lookup finds the
	// set by it. Optional.
	CacheKey map[string]string
	// KernelTree, when set, is the lib/modules/<release> directory of the
	// kernel the modules were built for: every dependency outside the set must
	// be one of its modules or built-ins.
	KernelTree string
	// Replace lets the set supersede a set already in the cache for the same
	// kernel, driver, version and flavor; without it such an add fails.
	Replace bool
	// SupportedGPUs, when set, is the driver's supported-gpus.json
	// (uncompressed, NVIDIA's format), stored with the set as an object.
	SupportedGPUs string
}

// AddFiles reads every module file of req (modinfo, digest), builds and
// validates the set's manifest and adds it with Add. It returns the manifest
// and the set id.
func (s *Store) AddFiles(ctx context.Context, req AddRequest) (*manifest.Manifest, string, error) {
	if len(req.Files) == 0 {
		return nil, "", fmt.Errorf("add %s %s: no module files", req.Driver, req.Version)
	}
	files := map[string]string{}
	var mods []manifest.Module
	for _, path := range req.Files {
		if err := ctx.Err(); err != nil {
			return nil, "", fmt.Errorf("add %s %s: %w", req.Driver, req.Version, err)
		}
		info, err := modinfo.ReadFile(path)
		if err != nil {
			return nil, "", fmt.Errorf("add %s %s: %w", req.Driver, req.Version, err)
		}
		sha, verity, size, err := digestFile(path)
		if err != nil {
			return nil, "", fmt.Errorf("add %s %s: %w", req.Driver, req.Version, err)
		}
		name := filepath.Base(path)
		if prev, dup := files[name]; dup {
			return nil, "", fmt.Errorf("add %s %s: %s and %s have the same file name", req.Driver, req.Version, prev, path)
		}
		files[name] = path
		mod := manifest.ModuleFromInfo(info, name, sha, size)
		mod.Verity = verity
		mods = append(mods, mod)
	}
	m, err := manifest.Build(req.Driver, req.Version, req.Flavor, mods, req.CacheKey)
	if err != nil {
		return nil, "", fmt.Errorf("add: %w", err)
	}
	if req.SupportedGPUs != "" {
		sha, size, err := hashFile(req.SupportedGPUs)
		if err != nil {
			return nil, "", fmt.Errorf("add %s %s: supported-gpus: %w", req.Driver, req.Version, err)
		}
		if _, dup := files[manifest.SupportedGPUsFile]; dup {
			return nil, "", fmt.Errorf("add %s %s: a module file is named %s", req.Driver, req.Version, manifest.SupportedGPUsFile)
		}
		m.SupportedGPUs = &manifest.File{File: manifest.SupportedGPUsFile, SHA256: sha, Size: size}
		files[manifest.SupportedGPUsFile] = req.SupportedGPUs
	}
	if req.KernelTree != "" {
		if err := checkExternal(m, req.KernelTree); err != nil {
			return nil, "", fmt.Errorf("add %s %s: %w", req.Driver, req.Version, err)
		}
	}
	// m was just built from the files themselves: nothing to re-derive.
	id, err := s.add(ctx, m, files, inroot.OpenPath, req.Replace, false)
	if err != nil {
		return nil, "", err
	}
	return m, id, nil
}

// Add stores a set: the module file of each manifest module is read from
// files[module.File] and must match the module's digest; so is the set's
// supported-gpus.json, if the manifest has one. Everything the manifest
// says of a module that the module says of itself (aliases, vermagic,
// srcversion, dependencies, signature, firmware ...) is read again from the
// file and must be the same, or nothing is added (checkDerived). It writes the
// objects, then the manifest, then the cache key, then the kernel's boot
// index, each atomically, under the writer lock. Adding a set that is already
// there changes nothing (missing or corrupt objects are rewritten) and gives
// the same id. With replace, other sets for the same kernel, driver, version
// and flavor are removed once the new one is in place; without it they make
// Add fail.
func (s *Store) Add(ctx context.Context, m *manifest.Manifest, files map[string]string, replace bool) (string, error) {
	return s.add(ctx, m, files, s.openSource, replace, true)
}

// add is Add, opening the files with open; rederive re-reads the modules'
// metadata (checkDerived), which AddFiles, whose manifest comes from the
// files, need not.
func (s *Store) add(ctx context.Context, m *manifest.Manifest, files map[string]string, open func(string) (*os.File, error), replace, rederive bool) (string, error) {
	m = m.Clone()
	m.Canonicalize()
	if err := m.Validate(); err != nil {
		return "", fmt.Errorf("add: %w", err)
	}
	b, err := manifest.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("add: %w", err)
	}
	id := manifest.IDOf(b)
	what := fmt.Sprintf("add %s %s for %s", m.Driver, m.Version, m.Kernel)
	for _, mod := range m.Modules {
		if files[mod.File] == "" {
			return "", fmt.Errorf("%s: no source file given for %s", what, mod.File)
		}
	}
	if f := m.SupportedGPUs; f != nil && files[f.File] == "" {
		return "", fmt.Errorf("%s: no source file given for %s", what, f.File)
	}
	if rederive {
		if err := checkDerived(m, func(mod manifest.Module) (*os.File, error) { return open(files[mod.File]) }); err != nil {
			return "", fmt.Errorf("%s: refused: %w", what, err)
		}
	}

	unlock, err := s.lock(ctx)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	defer unlock()
	if _, err := s.recoverLocked(); err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}

	good, _, err := s.scan()
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	var superseded []string
	for _, st := range good {
		if st.id != id && st.m.Kernel == m.Kernel && st.m.Driver == m.Driver && st.m.Version == m.Version && st.m.Flavor == m.Flavor {
			superseded = append(superseded, st.id)
		}
	}
	if len(superseded) > 0 && !replace {
		return "", fmt.Errorf("%s: the cache already holds set %s for %s %s %q on this kernel; replace it explicitly (--replace)", what, superseded[0][:12], m.Driver, m.Version, m.Flavor)
	}

	for _, mod := range m.Modules {
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("%s: %w", what, err)
		}
		if err := s.putObject(open, files[mod.File], mod.SHA256, mod.Size); err != nil {
			return "", fmt.Errorf("%s: %w", what, err)
		}
	}
	if f := m.SupportedGPUs; f != nil {
		if err := s.putObject(open, files[f.File], f.SHA256, f.Size); err != nil {
			return "", fmt.Errorf("%s: %s: %w", what, f.File, err)
		}
	}
	at("objects")

	if old, err := inroot.ReadFile(s.root, s.manifestName(id), MaxRecord); err != nil || !bytes.Equal(old, b) {
		if err := s.writeAtomic(s.manifestName(id), b, 0o444, "manifest"); err != nil {
			return "", fmt.Errorf("%s: %w", what, err)
		}
	}
	at("manifest")

	if kid := manifest.KeyID(m.CacheKey); kid != "" {
		if old, err := inroot.ReadFile(s.root, s.keyName(kid), MaxRecord); err != nil || strings.TrimSpace(string(old)) != id {
			if err := s.writeAtomic(s.keyName(kid), []byte(id+"\n"), 0o644, "key"); err != nil {
				return "", fmt.Errorf("%s: %w", what, err)
			}
		}
	}
	at("key")

	for _, old := range superseded {
		if err := s.dropSetLocked(old); err != nil {
			return "", fmt.Errorf("%s: replace set %s: %w", what, old, err)
		}
	}
	if _, err := s.syncIndexes(); err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	at("done")
	if len(superseded) > 0 {
		if _, err := s.collectGarbage(); err != nil {
			return "", fmt.Errorf("%s: %w", what, err)
		}
	}
	return id, nil
}

// Remove deletes set id (a full id; see Resolve): its cache keys, then its
// manifest, then it is dropped from the boot index, then objects no other
// set uses are deleted.
func (s *Store) Remove(ctx context.Context, id string) error {
	if !manifest.IsDigest(id) {
		return fmt.Errorf("remove set %q: not a set id (64 lowercase hex digits)", id)
	}
	unlock, err := s.lock(ctx)
	if err != nil {
		return fmt.Errorf("remove set %s: %w", id, err)
	}
	defer unlock()
	if _, err := s.removeTemps(); err != nil {
		return fmt.Errorf("remove set %s: %w", id, err)
	}
	if _, err := inroot.Lstat(s.root, s.manifestName(id)); err != nil {
		return fmt.Errorf("remove set %s: %w", id, err)
	}
	if err := s.dropSetLocked(id); err != nil {
		return fmt.Errorf("remove set %s: %w", id, err)
	}
	if _, err := s.syncIndexes(); err != nil {
		return fmt.Errorf("remove set %s: %w", id, err)
	}
	if _, err := s.collectGarbage(); err != nil {
		return fmt.Errorf("remove set %s: set removed, but %w", id, err)
	}
	return nil
}

// dropSetLocked removes the cache keys pointing at id and then id's manifest.
func (s *Store) dropSetLocked(id string) error {
	dir := s.name(keysDir)
	ents, err := inroot.ReadDir(s.root, dir)
	if err != nil {
		return fmt.Errorf("drop keys: %w", err)
	}
	for _, e := range ents {
		if isTemp(e.Name()) {
			continue
		}
		b, err := inroot.ReadFile(s.root, path.Join(dir, e.Name()), MaxRecord)
		if err != nil {
			return fmt.Errorf("drop keys: %w", err)
		}
		if strings.TrimSpace(string(b)) == id {
			if err := inroot.Remove(s.root, path.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("drop keys: %w", err)
			}
		}
	}
	if err := inroot.SyncDir(s.root, dir); err != nil {
		return err
	}
	if err := inroot.Remove(s.root, s.manifestName(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("drop manifest: %w", err)
	}
	return inroot.SyncDir(s.root, s.name(setsDir))
}

// recoverLocked cleans up after writers that were killed: it removes their
// temporary files and rewrites boot indexes that do not match the manifests.
// It returns what it changed. Call it with the lock held.
func (s *Store) recoverLocked() ([]string, error) {
	temps, err := s.removeTemps()
	if err != nil {
		return temps, err
	}
	ixs, err := s.syncIndexes()
	return append(temps, ixs...), err
}

// allKernels lists, sorted and once each, the kernels that have an index on disk
// or a set among good.
func (s *Store) allKernels(good []set) ([]string, error) {
	kernels, err := s.indexedKernels()
	if err != nil {
		return nil, err
	}
	for _, st := range good {
		kernels = append(kernels, st.m.Kernel)
	}
	slices.Sort(kernels)
	return slices.Compact(kernels), nil
}

// syncIndexes rewrites every boot index that differs from what the manifests
// say, writes missing ones and removes those of kernels without sets. Invalid
// manifests are left out: /init must not load what cannot be verified. It
// returns the paths it changed. Call it with the lock held.
func (s *Store) syncIndexes() ([]string, error) {
	good, _, err := s.scan()
	if err != nil {
		return nil, err
	}
	kernels, err := s.allKernels(good)
	if err != nil {
		return nil, err
	}
	var changed []string
	for _, k := range kernels {
		name := s.indexName(k)
		ix := buildIndex(k, good)
		if len(ix.Sets) == 0 {
			if err := inroot.Remove(s.root, name); err == nil {
				changed = append(changed, s.host(name))
				if err := inroot.SyncDir(s.root, path.Dir(name)); err != nil {
					return changed, err
				}
			} else if !errors.Is(err, fs.ErrNotExist) {
				return changed, fmt.Errorf("remove boot index: %w", err)
			}
			continue
		}
		b, err := bootindex.Marshal(ix)
		if err != nil {
			return changed, err
		}
		if old, err := inroot.ReadFile(s.root, name, MaxRecord); err == nil && bytes.Equal(old, b) {
			continue
		}
		if err := s.writeAtomic(name, b, 0o644, "index"); err != nil {
			return changed, fmt.Errorf("boot index for %s: %w", k, err)
		}
		changed = append(changed, s.host(name))
	}
	return changed, nil
}

// indexedKernels lists the kernels that have an index file.
func (s *Store) indexedKernels() ([]string, error) {
	ents, err := inroot.ReadDir(s.root, s.name(indexDir))
	if err != nil {
		return nil, fmt.Errorf("list boot indexes: %w", err)
	}
	var ks []string
	for _, e := range ents {
		if k, ok := strings.CutSuffix(e.Name(), ".json"); ok && !isTemp(e.Name()) && !strings.HasPrefix(k, ".") {
			ks = append(ks, k)
		}
	}
	return ks, nil
}

// collectGarbage deletes objects no manifest references and returns their
// paths. It deletes nothing while some manifest cannot be read, since that
// manifest's objects are unknown. Call it with the lock held.
func (s *Store) collectGarbage() ([]string, error) {
	good, bad, err := s.scan()
	if err != nil {
		return nil, err
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("not deleting unused objects while %d manifest(s) cannot be read: %w", len(bad), badError(bad))
	}
	used := map[string]bool{}
	for _, st := range good {
		for _, mod := range st.m.Modules {
			used[mod.SHA256] = true
		}
		if f := st.m.SupportedGPUs; f != nil {
			used[f.SHA256] = true
		}
	}
	root := s.name(objectsDir)
	subs, err := inroot.ReadDir(s.root, root)
	if err != nil {
		return nil, fmt.Errorf("collect unused objects: %w", err)
	}
	var removed []string
	for _, sub := range subs {
		if !sub.IsDir() {
			continue
		}
		dir := path.Join(root, sub.Name())
		ents, err := inroot.ReadDir(s.root, dir)
		if err != nil {
			return removed, fmt.Errorf("collect unused objects: %w", err)
		}
		n := len(removed)
		for _, e := range ents {
			if isTemp(e.Name()) || !manifest.IsDigest(e.Name()) || used[e.Name()] {
				continue
			}
			p := path.Join(dir, e.Name())
			if err := inroot.Remove(s.root, p); err != nil {
				return removed, fmt.Errorf("collect unused objects: %w", err)
			}
			removed = append(removed, s.host(p))
		}
		if len(removed) > n {
			if err := inroot.SyncDir(s.root, dir); err != nil {
				return removed, err
			}
			// Drop the fan-out directory once empty; a later putObject makes it again.
			if err := inroot.Remove(s.root, dir); err == nil {
				if err := inroot.SyncDir(s.root, root); err != nil {
					return removed, err
				}
			}
		}
	}
	return removed, nil
}

// checkExternal checks that every dependency outside the set is a module or a
// built-in of the kernel tree (lib/modules/<release>, with modules.dep and
// modules.builtin) and that the tree is the set's kernel.
func checkExternal(m *manifest.Manifest, tree string) error {
	if rel := filepath.Base(filepath.Clean(tree)); rel != m.Kernel {
		return fmt.Errorf("kernel tree %s is for %s, the modules are for %s", tree, rel, m.Kernel)
	}
	have := map[string]bool{}
	for _, f := range []string{"modules.dep", "modules.builtin"} {
		names, err := treeModules(filepath.Join(tree, f))
		if err != nil {
			return err
		}
		for _, n := range names {
			have[n] = true
		}
	}
	var missing []string
	for _, e := range m.External {
		if !have[modname.Normalize(e)] {
			missing = append(missing, e)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("dependencies neither in the set nor in kernel %s (%s): %s", m.Kernel, tree, strings.Join(missing, ", "))
	}
	return nil
}

// treeModules returns the module names a modules.dep or modules.builtin file
// lists: each line's path (before any colon), base name up to the first dot,
// dashes as underscores.
func treeModules(path string) ([]string, error) {
	f, err := inroot.OpenPath(path)
	if err != nil {
		return nil, fmt.Errorf("read kernel tree: %w", err)
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		p, _, _ := strings.Cut(sc.Text(), ":")
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		base := filepath.Base(p)
		if i := strings.IndexByte(base, '.'); i >= 0 {
			base = base[:i]
		}
		names = append(names, modname.Normalize(base))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return names, nil
}
