package initramfscmd

import (
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestInitramfsHelpExamples runs the examples of initramfs exactly as
// written, with kpreload and kpreload-init built beside each other as make
// builds them, in a directory where ./6.1.0-56-cloud-amd64 links to that
// kernel's unpacked tree (as the help says) and ./cache holds one set for it
// (a synthetic module): the second carries that set, and no xfs module.
func TestInitramfsHelpExamples(t *testing.T) {
	const kver = "6.1.0-56-cloud-amd64"
	tree := testenv.KernelTree(t, kver)
	bin := t.TempDir()
	kpreload := testenv.GoBuildStatic(t, bin, "kpreload", "./cmd/kpreload")
	testenv.GoBuildStatic(t, bin, "kpreload-init", "./cmd/kpreload-init")
	ko := testenv.SyntheticModule(t, "kpreload_syn", kver)
	t.Chdir(t.TempDir())
	if err := os.Symlink(tree, kver); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCLI("cache", "add", "--cache", "./cache", "--driver", "kpreload-syn", "--version", "1.0", ko); code != 0 {
		t.Fatalf("cache add: exit %d: %s%s", code, out, errOut)
	}
	lines := cli.ExamplesOf(t, "kpreload initramfs")
	for _, l := range lines {
		out, err := exec.Command(kpreload, strings.Fields(l)[1:]...).Output()
		if err != nil {
			t.Fatalf("example %q: %v\n%s", l, err, out)
		}
		files := testenv.InitramfsFiles(t, "initrd.img")
		if _, ok := files["init"]; !ok {
			t.Errorf("example %q: initrd.img has no /init", l)
		}
		if !strings.Contains(l, "--json") {
			// One set: the kernel's own modules.
			if !strings.HasPrefix(string(out), "initrd.img: ") || !strings.Contains(string(out), " modules, 1 sets, ") {
				t.Errorf("example %q printed %q, want initrd.img's summary, the kernel's set alone", l, out)
			}
			continue
		}
		var res struct {
			Modules []string `json:"modules"`
			Sets    []string `json:"sets"`
		}
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("example %q: %v\n%s", l, err, out)
		}
		if len(res.Sets) != 2 || !slices.Contains(res.Modules, "kpreload_syn") || slices.Contains(res.Modules, "xfs") {
			t.Errorf("example %q: sets %q, modules %q; want the kernel's and the cache's set, kpreload_syn and no xfs", l, res.Sets, res.Modules)
		}
	}
	if len(lines) != 2 {
		t.Errorf("initramfs examples %q; the test knows 2", lines)
	}
}
