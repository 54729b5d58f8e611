package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// inCheckout makes the test's working directory a fresh directory that looks
// like the repository's root to a command (testdata/ and images/ are the
// repository's), so the examples that name committed files run exactly as
// written without writing into the checkout.
func inCheckout(t *testing.T) {
	t.Helper()
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	for _, d := range []string{"testdata", "images"} {
		if err := os.Symlink(filepath.Join(repo, d), d); err != nil {
			t.Fatal(err)
		}
	}
}

// examplesOf returns the example lines of the command at path ("kpreload plan").
func examplesOf(t *testing.T, path string) []string {
	t.Helper()
	for _, c := range treeCommands() {
		if c.CommandPath() == path {
			lines := exampleLines(t, c)
			if len(lines) == 0 {
				t.Fatalf("%s --help has no examples", path)
			}
			return lines
		}
	}
	t.Fatalf("no command %s", path)
	return nil
}

// runLine runs one example line as a shell would split it (none of these
// quote anything) and fails the test unless it exits 0.
func runLine(t *testing.T, line string) string {
	t.Helper()
	code, out, errOut := runCLI(strings.Fields(line)[1:]...)
	if code != 0 {
		t.Fatalf("%s: exit %d: %s", line, code, errOut)
	}
	return out
}

// TestXorgHelpExamples runs the examples of `kpreload xorg --help` exactly as
// written in a checkout: the H200 capture's directory and the H100 capture
// file, each with one GPU at 0000:00:06.0.
func TestXorgHelpExamples(t *testing.T) {
	inCheckout(t)
	lines := examplesOf(t, "kpreload xorg")
	if len(lines) != 2 {
		t.Fatalf("xorg examples: %q, want two", lines)
	}
	if out := runLine(t, lines[0]); out != "0000:00:06.0 -> BusID \"PCI:0:6:0\"\nwrote xorg.conf (1 GPUs)\n" {
		t.Errorf("%s printed %q", lines[0], out)
	}
	if conf, err := os.ReadFile("xorg.conf"); err != nil || !strings.Contains(string(conf), `BusID          "PCI:0:6:0"`) || !strings.Contains(string(conf), "device 0x2335") {
		t.Errorf("%s wrote %v\n%s", lines[0], err, conf)
	}
	var res xorgResult
	if err := json.Unmarshal([]byte(runLine(t, lines[1])), &res); err != nil || len(res.GPUs) != 1 || res.GPUs[0].DeviceID != 0x2330 || res.GPUs[0].BusID != "PCI:0:6:0" {
		t.Errorf("%s: %+v, %v; want the H100 at PCI:0:6:0", lines[1], res.GPUs, err)
	}
}

// TestMatchHelpExamples runs the examples of `kpreload match --help` exactly
// as written, where the kernel `kpreload kernels fetch` unpacked is linked as
// ./6.1.0-56-cloud-amd64, as the help says.
func TestMatchHelpExamples(t *testing.T) {
	const kver = "6.1.0-56-cloud-amd64"
	// As the help says: the tree kernels fetch unpacked, linked into the
	// working directory under its release's name.
	tree := testenv.KernelTree(t, kver)
	t.Chdir(t.TempDir())
	if err := os.Symlink(tree, kver); err != nil {
		t.Fatal(err)
	}
	lines := examplesOf(t, "kpreload match")
	if len(lines) != 2 {
		t.Fatalf("match examples: %q, want two", lines)
	}
	if out := runLine(t, lines[0]); out != "virtio_pci\n" {
		t.Errorf("%s printed %q, want virtio_pci", lines[0], out)
	}
	out := runLine(t, lines[1])
	var mods []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		mods = append(mods, strings.TrimSuffix(filepath.Base(l), ".ko"))
	}
	if strings.Join(mods, " ") != "virtio_ring virtio virtio_blk" || !strings.HasPrefix(out, "insmod "+kver+"/lib/modules/") {
		t.Errorf("%s printed\n%s\nwant insmod of virtio_ring, virtio, virtio_blk in that order", lines[1], out)
	}
}
