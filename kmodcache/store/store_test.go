package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// The two real Debian kernels the tests take modules from (scripts/lib.sh).
const (
	k61  = "6.1.0-56-cloud-amd64"
	k612 = "6.12.117+deb12-cloud-amd64"
)

// testSet is a set of real modules: virtio_net needs net_failover, which needs
// failover (all in the set); on 6.1 virtio_net also needs virtio and
// virtio_ring (the kernel's, external); libcrc32c has a softdep "pre: crc32c".
var testSet = []string{"kernel/drivers/net/virtio_net", "kernel/drivers/net/net_failover", "kernel/net/core/failover", "kernel/lib/libcrc32c"}

// kernelTree returns lib/modules/<kver> of an unpacked kernel, failing the
// test with how to get it when it is missing.
func kernelTree(t testing.TB, kver string) string {
	t.Helper()
	dir := filepath.Join(testenv.KernelTree(t, kver), "lib", "modules", kver)
	if _, err := os.Stat(filepath.Join(dir, "modules.dep")); err != nil {
		t.Fatalf("kernel %s is not unpacked (%v): run scripts/deps.sh and scripts/kernels.sh %s", kver, err, kver)
	}
	return dir
}

// moduleFiles returns the real module files of testSet for kver (.ko on 6.1, .ko.xz on 6.12).
func moduleFiles(t testing.TB, kver string) []string {
	t.Helper()
	tree := kernelTree(t, kver)
	ext := ".ko"
	if kver == k612 {
		ext = ".ko.xz"
	}
	var files []string
	for _, m := range testSet {
		p := filepath.Join(tree, m+ext)
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("module file of kernel %s missing: %v (re-run scripts/kernels.sh %s)", kver, err, kver)
		}
		files = append(files, p)
	}
	return files
}

// kmodField runs the real modinfo(8) and returns the values of field.
func kmodField(t *testing.T, file, field string) []string {
	t.Helper()
	if _, err := exec.LookPath("modinfo"); err != nil {
		t.Fatalf("modinfo (kmod) not found: run scripts/deps.sh (apt-get install kmod)")
	}
	out, err := exec.Command("modinfo", "-F", field, file).Output()
	if err != nil {
		t.Fatalf("modinfo -F %s %s: %v", field, file, err)
	}
	var vals []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			vals = append(vals, l)
		}
	}
	return vals
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "cache"))
	if err != nil {
		t.Fatalf("Open() error = %v", err)
	}
	return s
}

func addSet(t *testing.T, s *Store, req AddRequest) (*manifest.Manifest, string) {
	t.Helper()
	m, id, err := s.AddFiles(context.Background(), req)
	if err != nil {
		t.Fatalf("AddFiles(%s %s) error = %v", req.Driver, req.Version, err)
	}
	return m, id
}

func mustVerifyClean(t *testing.T, s *Store) {
	t.Helper()
	probs, err := s.Verify(context.Background())
	if err != nil {
		t.Fatalf("Verify() error = %v", err)
	}
	for _, p := range probs {
		t.Errorf("Verify() problem: %s", p)
	}
}

func TestAddListIndexVerify(t *testing.T) {
	s := openStore(t)
	key61 := map[string]string{"source": "virtio-test", "kernel": k61}
	m61, id61 := addSet(t, s, AddRequest{Driver: "virtio-test", Version: "1", Files: moduleFiles(t, k61), CacheKey: key61, KernelTree: kernelTree(t, k61)})
	m612, id612 := addSet(t, s, AddRequest{Driver: "virtio-test", Version: "1", Flavor: "xz", Files: moduleFiles(t, k612), KernelTree: kernelTree(t, k612)})

	if want, _ := manifest.ID(m61); id61 != want {
		t.Errorf("AddFiles() id = %s, want manifest.ID = %s", id61, want)
	}
	if got := sha256File(t, s.ManifestPath(id61)); got != id61 {
		t.Errorf("sha256 of %s = %s, want its id %s", s.ManifestPath(id61), got, id61)
	}

	entries, err := s.List()
	if err != nil {
		t.Fatalf("List() error = %v", err)
	}
	var size61 int64
	for _, f := range moduleFiles(t, k61) {
		fi, _ := os.Stat(f)
		size61 += fi.Size()
	}
	want := []Entry{
		{ID: id61, Kernel: k61, Driver: "virtio-test", Version: "1", Modules: 4, Size: size61},
		{ID: id612, Kernel: k612, Driver: "virtio-test", Version: "1", Flavor: "xz", Modules: 4},
	}
	if len(entries) != 2 {
		t.Fatalf("List() = %+v, want 2 entries", entries)
	}
	want[1].Size = entries[1].Size
	for i := range want {
		if entries[i] != want[i] {
			t.Errorf("List()[%d] = %+v, want %+v", i, entries[i], want[i])
		}
	}

	ks, err := s.Kernels()
	if err != nil || !slices.Equal(ks, []string{k61, k612}) {
		t.Errorf("Kernels() = %q, %v, want [%s %s]", ks, err, k61, k612)
	}

	// External dependencies: what real modinfo says the modules need, minus the set.
	for _, tc := range []struct {
		kver string
		m    *manifest.Manifest
	}{{k61, m61}, {k612, m612}} {
		var ext []string
		for _, f := range moduleFiles(t, tc.kver) {
			for _, d := range kmodField(t, f, "depends") {
				for _, n := range strings.Split(d, ",") {
					if n != "" && !slices.ContainsFunc(tc.m.Modules, func(mod manifest.Module) bool { return mod.Name == n }) {
						ext = append(ext, n)
					}
				}
			}
		}
		slices.Sort(ext)
		ext = slices.Compact(ext)
		if !slices.Equal(tc.m.External, ext) {
			t.Errorf("%s manifest External = %q, want %q (from modinfo)", tc.kver, tc.m.External, ext)
		}
	}
	if !slices.Equal(m61.External, []string{"virtio", "virtio_ring"}) {
		t.Errorf("6.1 manifest External = %q, want [virtio virtio_ring]", m61.External)
	}

	// The boot index: every module file reachable from the index directory,
	// aliases, depends and softdeps as real modinfo(8) reports them.
	for _, kver := range []string{k61, k612} {
		ix, err := s.Index(kver)
		if err != nil {
			t.Fatalf("Index(%s) error = %v", kver, err)
		}
		built, err := s.BuildIndex(kver)
		if err != nil {
			t.Fatalf("BuildIndex(%s) error = %v", kver, err)
		}
		if len(ix.Sets) != 1 || len(built.Sets) != 1 || ix.Sets[0].ID != built.Sets[0].ID {
			t.Fatalf("Index(%s) sets = %+v, want the one set BuildIndex gives", kver, ix.Sets)
		}
		set := ix.Sets[0]
		if set.Dir != "../objects/sha256" {
			t.Errorf("Index(%s).Sets[0].Dir = %q, want ../objects/sha256", kver, set.Dir)
		}
		byName := map[string]string{}
		for _, f := range moduleFiles(t, kver) {
			byName[kmodField(t, f, "name")[0]] = f
		}
		if len(set.Modules) != len(byName) {
			t.Errorf("Index(%s) has %d modules, want %d", kver, len(set.Modules), len(byName))
		}
		for _, mod := range set.Modules {
			src := byName[mod.Name]
			if src == "" {
				t.Errorf("Index(%s) module %s is not one of the files added", kver, mod.Name)
				continue
			}
			path := filepath.Join(filepath.Dir(s.IndexPath(kver)), set.Dir, mod.Path)
			got, err := os.ReadFile(path)
			orig, _ := os.ReadFile(src)
			if err != nil || !bytes.Equal(got, orig) {
				t.Errorf("index path %s for %s: err %v, same bytes as %s: %v", path, mod.Name, err, src, bytes.Equal(got, orig))
			}
			if h := sha256File(t, path); h != mod.SHA256 {
				t.Errorf("index module %s sha256 = %s, file has %s", mod.Name, mod.SHA256, h)
			}
			wantAliases := kmodField(t, src, "alias")
			slices.Sort(wantAliases)
			if !slices.Equal(mod.Aliases, wantAliases) {
				t.Errorf("index module %s aliases = %q, modinfo says %q", mod.Name, mod.Aliases, wantAliases)
			}
			var wantDeps []string
			for _, d := range kmodField(t, src, "depends") {
				wantDeps = append(wantDeps, strings.Split(d, ",")...)
			}
			slices.Sort(wantDeps)
			if !slices.Equal(mod.Depends, wantDeps) {
				t.Errorf("index module %s depends = %q, modinfo says %q", mod.Name, mod.Depends, wantDeps)
			}
			if v := kmodField(t, src, "vermagic"); len(v) != 1 || strings.TrimSpace(mod.Vermagic) != v[0] {
				t.Errorf("index module %s vermagic = %q, modinfo says %q", mod.Name, mod.Vermagic, v)
			}
			wantComp := ""
			if kver == k612 {
				wantComp = "xz"
			}
			if mod.Compression != wantComp {
				t.Errorf("index module %s compression = %q, want %q", mod.Name, mod.Compression, wantComp)
			}
			var wantPre []string
			for _, sd := range kmodField(t, src, "softdep") {
				if rest, ok := strings.CutPrefix(sd, "pre:"); ok {
					wantPre = append(wantPre, strings.Fields(rest)...)
				}
			}
			if !slices.Equal(mod.SoftPre, wantPre) {
				t.Errorf("index module %s softpre = %q, modinfo softdep says %q", mod.Name, mod.SoftPre, wantPre)
			}
			if mod.Name == "libcrc32c" && !slices.Equal(mod.SoftPre, []string{"crc32c"}) {
				t.Errorf("index module libcrc32c softpre = %q, want [crc32c]", mod.SoftPre)
			}
		}
	}

	if id, ok, err := s.Lookup(key61); err != nil || !ok || id != id61 {
		t.Errorf("Lookup(key61) = %s, %v, %v, want %s, true, nil", id, ok, err, id61)
	}
	if id, ok, err := s.Lookup(map[string]string{"source": "other"}); err != nil || ok {
		t.Errorf("Lookup(unknown key) = %s, %v, %v, want not found", id, ok, err)
	}
	if got, err := s.Resolve(id61[:12]); err != nil || got != id61 {
		t.Errorf("Resolve(%s) = %s, %v, want %s", id61[:12], got, err, id61)
	}
	mustVerifyClean(t, s)
}

func TestVerifyReportsCorruptAndMissingObjects(t *testing.T) {
	s := openStore(t)
	m, id := addSet(t, s, AddRequest{Driver: "virtio-test", Version: "1", Files: moduleFiles(t, k612)})
	mustVerifyClean(t, s)

	// Flip one byte in the middle of net_failover's object.
	var victim, gone manifest.Module
	for _, mod := range m.Modules {
		switch mod.Name {
		case "net_failover":
			victim = mod
		case "failover":
			gone = mod
		}
	}
	path := s.ObjectPath(victim.SHA256)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read object: %v", err)
	}
	b[len(b)/2] ^= 0x01
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	probs, err := s.Verify(context.Background())
	if err != nil {
		t.Fatalf("Verify() error = %v", err)
	}
	if len(probs) != 1 || probs[0].Kind != ProblemCorruptObject || probs[0].Path != path ||
		!slices.Equal(probs[0].Modules, []string{"net_failover"}) || !slices.Equal(probs[0].Sets, []string{id}) {
		t.Fatalf("Verify() after corrupting %s = %v, want exactly one corrupt-object problem for it", path, probs)
	}
	t.Logf("corrupt: %s", probs[0])

	missing := s.ObjectPath(gone.SHA256)
	if err := os.Remove(missing); err != nil {
		t.Fatal(err)
	}
	probs, err = s.Verify(context.Background())
	if err != nil {
		t.Fatalf("Verify() error = %v", err)
	}
	kinds := map[string]string{}
	for _, p := range probs {
		kinds[p.Path] = p.Kind
	}
	if len(probs) != 2 || kinds[path] != ProblemCorruptObject || kinds[missing] != ProblemMissingObject {
		t.Fatalf("Verify() after also deleting %s = %v, want exactly corrupt %s and missing %s", missing, probs, path, missing)
	}
	t.Logf("missing: %s", probs[0])

	// Adding the set again rewrites the damaged objects, same id.
	_, id2 := addSet(t, s, AddRequest{Driver: "virtio-test", Version: "1", Files: moduleFiles(t, k612)})
	if id2 != id {
		t.Errorf("re-adding the set gave id %s, want %s", id2, id)
	}
	mustVerifyClean(t, s)
}

func TestVerifyReportsBadManifestAndStaleIndex(t *testing.T) {
	s := openStore(t)
	_, id := addSet(t, s, AddRequest{Driver: "virtio-test", Version: "1", Files: moduleFiles(t, k61)})
	mpath := s.ManifestPath(id)
	b, _ := os.ReadFile(mpath)
	os.Chmod(mpath, 0o644)
	if err := os.WriteFile(mpath, bytes.Replace(b, []byte(`"virtio-test"`), []byte(`"virtio-tost"`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	probs, err := s.Verify(context.Background())
	if err != nil {
		t.Fatalf("Verify() error = %v", err)
	}
	// The edited manifest is bad, and the index still lists its set.
	var kinds []string
	for _, p := range probs {
		kinds = append(kinds, p.Kind)
	}
	if !slices.Equal(kinds, []string{ProblemBadManifest, ProblemStaleIndex}) || probs[0].Path != mpath {
		t.Errorf("Verify() after editing the manifest = %v, want bad-manifest %s then stale-index", probs, mpath)
	}
	if _, err := s.List(); err == nil || !strings.Contains(err.Error(), "is corrupt") {
		t.Errorf("List() error = %v, want one saying the manifest is corrupt", err)
	}
	if _, err := s.Repair(context.Background()); err == nil || !strings.Contains(err.Error(), "not deleting unused objects") {
		t.Errorf("Repair() with a bad manifest error = %v, want it to refuse collecting objects", err)
	}
	if err := s.Remove(context.Background(), id); err != nil {
		t.Fatalf("Remove(bad set) error = %v", err)
	}
	mustVerifyClean(t, s)
}

func TestAddSameSetTwice(t *testing.T) {
	s := openStore(t)
	files := moduleFiles(t, k61)
	_, id1 := addSet(t, s, AddRequest{Driver: "virtio-test", Version: "1", Files: files})
	rev := slices.Clone(files)
	slices.Reverse(rev)
	_, id2 := addSet(t, s, AddRequest{Driver: "virtio-test", Version: "1", Files: rev})
	if id1 != id2 {
		t.Errorf("AddFiles(same files, other order) id = %s, want %s", id2, id1)
	}
	ents, _ := os.ReadDir(filepath.Join(s.Dir(), "sets"))
	if len(ents) != 1 {
		t.Errorf("sets/ has %d entries after adding one set twice, want 1", len(ents))
	}
	if n := countObjects(t, s); n != len(files) {
		t.Errorf("objects after adding one set twice = %d, want %d", n, len(files))
	}
	mustVerifyClean(t, s)
}

func countObjects(t *testing.T, s *Store) int {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(s.Dir(), "objects", "sha256", "*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	return len(matches)
}

func TestAddMixedKernels(t *testing.T) {
	s := openStore(t)
	files := append(moduleFiles(t, k61)[:2], moduleFiles(t, k612)[2:]...)
	_, _, err := s.AddFiles(context.Background(), AddRequest{Driver: "virtio-test", Version: "1", Files: files})
	if err == nil {
		t.Fatalf("AddFiles(modules of 6.1 and 6.12) = nil error, want one naming both vermagics")
	}
	v61 := kmodField(t, files[0], "vermagic")[0]
	v612 := kmodField(t, files[3], "vermagic")[0]
	for _, want := range []string{v61, v612, "(virtio_net.ko, net_failover.ko)", "(failover.ko.xz, libcrc32c.ko.xz)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("AddFiles(mixed kernels) error = %q, want it to contain %q", err, want)
		}
	}
	t.Logf("mixed kernels: %v", err)
	if ents, _ := s.List(); len(ents) != 0 || countObjects(t, s) != 0 {
		t.Errorf("after a refused add: %d sets, %d objects, want none", len(ents), countObjects(t, s))
	}
}

func TestManifestIDStableAcrossProcesses(t *testing.T) {
	files := moduleFiles(t, k612)
	s := openStore(t)
	_, id := addSet(t, s, AddRequest{Driver: "virtio-test", Version: "1", Files: files, CacheKey: crashKey})
	// A second process, another cache directory, files in another order.
	rev := slices.Clone(files)
	slices.Reverse(rev)
	out := runChild(t, childSpec{cache: filepath.Join(t.TempDir(), "c2"), files: rev})
	if got := strings.TrimSpace(out); got != id {
		t.Errorf("set id from another process = %q, want %s", got, id)
	}
}

func TestReplace(t *testing.T) {
	s := openStore(t)
	files := moduleFiles(t, k61)
	_, old := addSet(t, s, AddRequest{Driver: "virtio-test", Version: "1", Files: files, CacheKey: map[string]string{"build": "1"}})
	// A rebuild (other cache key) of the same driver version for the same kernel.
	req := AddRequest{Driver: "virtio-test", Version: "1", Files: files[:3], CacheKey: map[string]string{"build": "2"}}
	if _, _, err := s.AddFiles(context.Background(), req); err == nil || !strings.Contains(err.Error(), "--replace") {
		t.Fatalf("AddFiles(conflicting set) error = %v, want one asking for --replace", err)
	}
	req.Replace = true
	_, id := addSet(t, s, req)
	ents, err := s.List()
	if err != nil || len(ents) != 1 || ents[0].ID != id {
		t.Fatalf("List() after replace = %+v, %v, want only %s", ents, err, id)
	}
	if _, ok, _ := s.Lookup(map[string]string{"build": "1"}); ok {
		t.Errorf("Lookup(old key) found a set after it was replaced")
	}
	if _, err := os.Stat(s.ManifestPath(old)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old manifest after replace: %v, want it gone", err)
	}
	if n := countObjects(t, s); n != 3 {
		t.Errorf("objects after replace = %d, want 3 (libcrc32c's collected)", n)
	}
	mustVerifyClean(t, s)
}

func TestRemove(t *testing.T) {
	s := openStore(t)
	_, id61 := addSet(t, s, AddRequest{Driver: "virtio-test", Version: "1", Files: moduleFiles(t, k61), CacheKey: map[string]string{"k": "61"}})
	_, id612 := addSet(t, s, AddRequest{Driver: "virtio-test", Version: "1", Files: moduleFiles(t, k612)})
	if err := s.Remove(context.Background(), id61); err != nil {
		t.Fatalf("Remove() error = %v", err)
	}
	if _, err := os.Stat(s.IndexPath(k61)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("index of %s after removing its only set: %v, want it gone", k61, err)
	}
	if _, ok, _ := s.Lookup(map[string]string{"k": "61"}); ok {
		t.Errorf("Lookup(key of removed set) found it")
	}
	if n := countObjects(t, s); n != 4 {
		t.Errorf("objects after removing the 6.1 set = %d, want 4", n)
	}
	ents, _ := s.List()
	if len(ents) != 1 || ents[0].ID != id612 {
		t.Errorf("List() after Remove = %+v, want only %s", ents, id612)
	}
	if err := s.Remove(context.Background(), id61); err == nil {
		t.Errorf("Remove(removed set) = nil error, want one")
	}
	mustVerifyClean(t, s)
}

func TestKernelTreeExternal(t *testing.T) {
	s := openStore(t)
	real := kernelTree(t, k61)
	// A copy of the 6.1 tree's lists without virtio_ring.
	tree := filepath.Join(t.TempDir(), k61)
	os.MkdirAll(tree, 0o755)
	dep, err := os.ReadFile(filepath.Join(real, "modules.dep"))
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, l := range strings.Split(string(dep), "\n") {
		if !strings.HasPrefix(l, "kernel/drivers/virtio/virtio_ring.ko:") {
			kept = append(kept, l)
		}
	}
	if len(kept) == len(strings.Split(string(dep), "\n")) {
		t.Fatalf("real modules.dep of %s has no virtio_ring line to remove", k61)
	}
	os.WriteFile(filepath.Join(tree, "modules.dep"), []byte(strings.Join(kept, "\n")), 0o644)
	builtin, _ := os.ReadFile(filepath.Join(real, "modules.builtin"))
	os.WriteFile(filepath.Join(tree, "modules.builtin"), builtin, 0o644)

	tests := []struct {
		tree, want string
	}{
		{real, ""},
		{tree, "dependencies neither in the set nor in kernel " + k61},
		{kernelTree(t, k612), "is for " + k612 + ", the modules are for " + k61},
	}
	for _, tt := range tests {
		_, _, err := s.AddFiles(context.Background(), AddRequest{Driver: "virtio-test", Version: "1", Files: moduleFiles(t, k61), KernelTree: tt.tree})
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("AddFiles(KernelTree %s) error = %v, want nil", tt.tree, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("AddFiles(KernelTree %s) error = %v, want it to contain %q", tt.tree, err, tt.want)
		}
		if tt.tree == tree && err != nil && !strings.HasSuffix(err.Error(), ": virtio_ring") {
			t.Errorf("AddFiles(tree without virtio_ring) error = %q, want it to end naming virtio_ring", err)
		}
	}
}
