package scripts_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// optionCase is a case pattern of a script's argument loop: "--name)".
var optionCase = regexp.MustCompile(`(?m)^\s+(--[a-z][a-z-]*)[)|=]`)

// TestBenchHelp runs the boot benchmarks' --help and checks it names every
// option their argument loops take (--slow-root among them), and that a
// --slow-root that is not whole seconds is refused before anything runs.
func TestBenchHelp(t *testing.T) {
	root := testenv.RepoRoot(t)
	for _, name := range []string{"bench-boot.sh", "bench-nvidia.sh"} {
		t.Run(name, func(t *testing.T) {
			script := filepath.Join(root, "scripts", name)
			src, err := os.ReadFile(script)
			if err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command("bash", script, "--help").CombinedOutput()
			if err != nil {
				t.Fatalf("%s --help: %v\n%s", name, err, out)
			}
			opts := map[string]bool{}
			for _, m := range optionCase.FindAllStringSubmatch(string(src), -1) {
				opts[m[1]] = true
			}
			if !opts["--slow-root"] {
				t.Errorf("%s takes no --slow-root: options %v", name, opts)
			}
			for o := range opts {
				if o != "--help" && !strings.Contains(string(out), o) {
					t.Errorf("%s --help does not name %s:\n%s", name, o, out)
				}
			}
			out, err = exec.Command("bash", script, "--slow-root", "1.5").CombinedOutput()
			if err == nil || !strings.Contains(string(out), "--slow-root '1.5': want whole seconds") {
				t.Errorf("%s --slow-root 1.5: %v, %s; want it refused", name, err, out)
			}
		})
	}
}
