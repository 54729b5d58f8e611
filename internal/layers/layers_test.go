// Package layers holds the test that keeps kpreload's import graph layered:
// internal <- kmodcache <- report <- live <- gpu <- initramfs, with builder and
// cmd on top, the test helpers of testsupport/ beside report, and /init free of
// build-side code and within its size budget (initSizeBudget).
package layers

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

const mod = "github.com/kpreload/kpreload/"

// forbidden maps a layer to the layers (and modules) it must not import.
var forbidden = map[string][]string{
	"internal/":    {"kmodcache/", "report/", "live/", "gpu/", "initramfs/", "builder/", "cmd/"},
	"kmodcache/":   {"report/", "live/", "gpu/", "initramfs/", "builder/", "cmd/"},
	"report/":      {"live/", "gpu/", "initramfs/", "builder/", "cmd/"},
	"live/":        {"gpu/", "initramfs/", "builder/", "cmd/"},
	"gpu/":         {"initramfs/", "builder/", "cmd/"},
	"initramfs/":   {"builder/", "cmd/"},
	"testsupport/": {"live/", "gpu/", "initramfs/", "builder/", "cmd/"},
}

// testHelpers is the folder of the helpers only tests import.
const testHelpers = "testsupport/"

// isTestHelper says whether the package pkg (without the module prefix) is
// one only tests import: one of testsupport/, or a fake of one package kept
// beside it as net/http/httptest is (gpu/pci/pcitest, kmodcache/remote/remotetest).
func isTestHelper(pkg string) bool {
	return strings.HasPrefix(pkg, testHelpers) || strings.HasSuffix(pkg[strings.LastIndex(pkg, "/")+1:], "test")
}

// pkgImports is one package of `go list`: its own imports and its tests'.
type pkgImports struct {
	imports, tests []string
}

// listImports runs go list over the repository: each package (without the
// module prefix) and what it and its tests import (with it).
func listImports(t *testing.T) map[string]pkgImports {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}|{{join .Imports " "}}|{{join .TestImports " "}} {{join .XTestImports " "}}`, "./...")
	cmd.Dir = testenv.RepoRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]pkgImports{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 3 {
			t.Fatalf("go list: unexpected line %q", line)
		}
		pkgs[strings.TrimPrefix(f[0], mod)] = pkgImports{strings.Fields(f[1]), strings.Fields(f[2])}
	}
	return pkgs
}

// badLayer returns the layer of bad that the package path imp (with the
// module prefix) is in, or "".
func badLayer(imp string, bad []string) string {
	for _, b := range bad {
		if strings.HasPrefix(imp, mod+b) {
			return b
		}
	}
	return ""
}

// reaches returns the chain of imports from the package path imp (with the
// module prefix) to a package in one of the layers bad, following the
// packages' own (non-test) imports, or nil.
func reaches(pkgs map[string]pkgImports, imp string, bad []string) []string {
	prev := map[string]string{imp: ""}
	queue := []string{imp}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if badLayer(p, bad) != "" {
			var chain []string
			for ; p != ""; p = prev[p] {
				chain = append(chain, strings.TrimPrefix(p, mod))
			}
			slices.Reverse(chain)
			return chain
		}
		for _, next := range pkgs[strings.TrimPrefix(p, mod)].imports {
			if _, seen := prev[next]; !seen && strings.HasPrefix(next, mod) {
				prev[next] = p
				queue = append(queue, next)
			}
		}
	}
	return nil
}

// TestImportsRunOneWay checks the arrows: a package imports nothing of the
// layers above its own; its tests import nothing that leads there either,
// through a test helper or otherwise (so a helper in testsupport/ serves only
// the layers at or above what it imports); and no product package imports a
// test helper (isTestHelper).
func TestImportsRunOneWay(t *testing.T) {
	pkgs := listImports(t)
	for pkg, p := range pkgs {
		if !isTestHelper(pkg) {
			for _, imp := range p.imports {
				if strings.HasPrefix(imp, mod) && isTestHelper(strings.TrimPrefix(imp, mod)) {
					t.Errorf("%s imports the test helper %s: only tests (and other test helpers) import it", pkg, strings.TrimPrefix(imp, mod))
				}
			}
		}
		for layer, bad := range forbidden {
			if !strings.HasPrefix(pkg, layer) || strings.Contains(pkg, "/e2e") {
				continue
			}
			for _, imp := range p.imports {
				if b := badLayer(imp, bad); b != "" {
					t.Errorf("%s imports %s: %s must not import %s", pkg, strings.TrimPrefix(imp, mod), layer, b)
				}
			}
			for _, imp := range p.tests {
				if chain := reaches(pkgs, imp, bad); chain != nil {
					t.Errorf("%s's tests import %s: %s must not import %s, not even in tests", pkg, strings.Join(chain, " -> "), layer, badLayer(mod+chain[len(chain)-1], bad))
				}
			}
		}
	}
	// /init links nothing of the build side: no cobra, no Packer, no registry client, no test helper.
	const initPkg = mod + "cmd/kpreload-init"
	cmd := exec.Command("go", "list", "-deps", initPkg)
	cmd.Dir = testenv.RepoRoot(t)
	deps, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, d := range strings.Fields(string(deps)) {
		if d == initPkg {
			continue
		}
		for _, bad := range []string{"github.com/spf13/cobra", "github.com/hashicorp/", "oras.land/", "k8s.io/", "github.com/NVIDIA/", mod + "builder/", mod + "cmd/", mod + testHelpers} {
			if strings.HasPrefix(d, bad) {
				t.Errorf("/init links %s", d)
			}
		}
	}
}

// TestFakesBesideTheirPackage checks that a fake kept beside its package
// (gpu/pci/pcitest, kmodcache/remote/remotetest, ...) sits at that
// package's layer: it imports nothing of testsupport/, whose helpers serve
// the tests above them (a test hands the fake what testsupport gives it).
func TestFakesBesideTheirPackage(t *testing.T) {
	pkgs := listImports(t)
	fakes := 0
	for pkg, p := range pkgs {
		if !isTestHelper(pkg) || strings.HasPrefix(pkg, testHelpers) {
			continue
		}
		fakes++
		for _, imp := range p.imports {
			if strings.HasPrefix(imp, mod+testHelpers) {
				t.Errorf("%s, a fake beside its package, imports %s: take what it gives as a parameter from the test", pkg, strings.TrimPrefix(imp, mod))
			}
		}
	}
	if fakes < 3 {
		t.Fatalf("found %d fakes beside their packages: the walk is wrong", fakes)
	}
}
