package cli

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestCacheHelpExamples runs, exactly as written and in this order, the
// examples of kernels fetch (the kernel the build needs, from the download
// cache), cache keygen, build, cache ls, index, verify, push and pull,
// modinfo and cache add (as root, which the test is: sudo dropped), in a directory holding ./recipes and ./cache (the default
// cache too), against a real registry on 127.0.0.1:5055: the test driver's
// cell is TestBuildJSONAndExitStatus's real dkms build when that test ran,
// else the first build example compiles it.
func TestCacheHelpExamples(t *testing.T) {
	testenv.SkipShort(t, "builds the test driver with the real dkms")
	root := withCompletion(NewRoot())
	examples := func(path ...string) []string {
		c, _, err := root.Find(path)
		if err != nil || c.CommandPath() != "kpreload "+strings.Join(path, " ") {
			t.Fatalf("no command %v: %v", path, err)
		}
		return exampleLines(t, c)
	}
	var lines []string
	for _, p := range [][]string{{"kernels", "fetch"}, {"cache", "keygen"}, {"build"}, {"cache", "ls"}, {"cache", "index"}, {"cache", "verify"}, {"cache", "push"}, {"cache", "pull"}, {"modinfo"}, {"cache", "add"}} {
		lines = append(lines, examples(p...)...)
	}
	reg := testenv.StartRegistry(t)
	forward5055(t, reg.Addr)
	recipes, err := filepath.Abs("../../../recipes")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.Symlink(recipes, "recipes"); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	seedCache(t, cache)
	t.Setenv("KPRELOAD_CACHE_DIR", cache)
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	for _, l := range lines {
		args := strings.Fields(l)[1:]
		if args[0] == "modinfo" {
			copyModule(t, cache, "testdriver.ko")
		}
		code, out, errOut := runCLI(args...)
		if code != 0 {
			t.Fatalf("example %q: exit %d: %s\n%s", l, code, out, errOut)
		}
		if args[0] == "cache" && args[1] == "ls" && !strings.Contains(out, "kpreload-edu") {
			t.Errorf("example %q printed no test driver set:\n%s", l, out)
		}
		if args[0] == "modinfo" && !strings.Contains(out, "testdriver.ko") {
			t.Errorf("example %q:\n%s", l, out)
		}
	}
}

// copyModule copies the first module file of cache to name.
func copyModule(t *testing.T, cache, name string) {
	t.Helper()
	var src string
	filepath.WalkDir(filepath.Join(cache, "objects"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && src == "" {
			src = p
		}
		return nil
	})
	b, err := os.ReadFile(src)
	if src == "" || err != nil {
		t.Fatalf("no module file in %s: %v", cache, err)
	}
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
