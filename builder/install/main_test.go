package install

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/initramfs/rootcheck"
	"github.com/kpreload/kpreload/testsupport/buildtest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// shared is a folder the package's tests keep things in that several of them
// use (a static binary, cells built with the real dkms); TestMain removes it.
var shared struct {
	once sync.Once
	dir  string
	err  error
}

// TestMain removes the shared folder once every test has run.
func TestMain(m *testing.M) {
	code := m.Run()
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// sharedDir returns the shared folder, made on first use.
func sharedDir(t *testing.T) string {
	t.Helper()
	shared.once.Do(func() { shared.dir, shared.err = os.MkdirTemp("", "kpreload-install-test-") })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.dir
}

var (
	kpreloadOnce sync.Once
	kpreloadBin  string
)

// testKpreload builds the static kpreload command once for the package.
func testKpreload(t *testing.T) string {
	t.Helper()
	dir := sharedDir(t)
	kpreloadOnce.Do(func() {
		kpreloadBin = testenv.GoBuildStatic(t, dir, "kpreload", "./cmd/kpreload")
	})
	if kpreloadBin == "" {
		t.Fatal("building the static kpreload command failed in an earlier test")
	}
	return kpreloadBin
}

// builtCells is a cache of the testdriver cells of testKernel and a newer
// kernel, built once with the real dkms for the tests of hooks that pull
// cells (they push these to registries of their own).
var builtCells struct {
	sync.Mutex
	dirs map[string]string // newer kernel -> cache
}

// copyBuiltCells puts the testdriver cells of testKernel and newer, built with
// the real dkms once for the package, into the cache at dst.
func copyBuiltCells(t *testing.T, r *recipe.Recipe, newer, dst string) {
	t.Helper()
	builtCells.Lock()
	defer builtCells.Unlock()
	cache, ok := builtCells.dirs[newer]
	if !ok {
		cache = filepath.Join(sharedDir(t), "cells-"+newer)
		res, err := matrix.Run(context.Background(), matrix.Options{Recipes: []*recipe.Recipe{r}, Kernels: []string{testKernel, newer}, CacheDir: cache})
		if err != nil || len(res) != 2 || res[0].State != matrix.StateOK || res[1].State != matrix.StateOK {
			t.Fatalf("build the testdriver cells of %s and %s: %+v, %v", testKernel, newer, res, err)
		}
		if builtCells.dirs == nil {
			builtCells.dirs = map[string]string{}
		}
		builtCells.dirs[newer] = cache
	}
	buildtest.CopyCells(t, cache, dst)
}

// testRootFS is the filesystem the tests' roots boot from, named as
// `kpreload install --root-filesystem ext4` names it. The roots are
// directories in the test's temporary directory, whose own filesystem says
// nothing of a real root's (and cannot be told at all where /tmp is a tmpfs,
// as on Debian 13); TestInstallRefusesUnmountableRoot and the CLI's tests
// cover finding it.
func testRootFS() *rootcheck.Root { return &rootcheck.Root{FSType: "ext4"} }
