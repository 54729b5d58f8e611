// Package layers holds the test that keeps kpreload's import graph layered:
// kmodcache <- live <- gpu <- initramfs, with builder and cmd on top and
// /init free of build-side code.
package layers

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

const mod = "github.com/kpreload/kpreload/"

// forbidden maps a layer to the layers (and modules) it must not import.
var forbidden = map[string][]string{
	"kmodcache/": {"live/", "gpu/", "initramfs/", "builder/", "cmd/"},
	"live/":      {"gpu/", "initramfs/", "builder/", "cmd/"},
	"gpu/":       {"initramfs/", "builder/", "cmd/"},
	"initramfs/": {"builder/", "cmd/"},
}

func TestImportsRunOneWay(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...")
	cmd.Dir = testenv.RepoRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], mod)
		for layer, bad := range forbidden {
			if !strings.HasPrefix(pkg, layer) || strings.Contains(pkg, "/e2e") {
				continue
			}
			for _, imp := range f[1:] {
				for _, b := range bad {
					if strings.HasPrefix(imp, mod+b) {
						t.Errorf("%s imports %s: %s must not import %s", pkg, strings.TrimPrefix(imp, mod), layer, b)
					}
				}
			}
		}
	}
	// /init links nothing of the build side: no cobra, no Packer, no registry client.
	cmd = exec.Command("go", "list", "-deps", "./initramfs/cmd/init")
	cmd.Dir = testenv.RepoRoot(t)
	deps, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, d := range strings.Fields(string(deps)) {
		for _, bad := range []string{"github.com/spf13/cobra", "github.com/hashicorp/", "oras.land/", "k8s.io/", "github.com/NVIDIA/", mod + "builder/", mod + "cmd/"} {
			if strings.HasPrefix(d, bad) {
				t.Errorf("/init links %s", d)
			}
		}
	}
}
