package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/gpu/switcher"
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

// TestPlanHelpExamples runs the examples of `kpreload plan --help` exactly as
// written in a checkout: the committed H100 and H200 captures, read as they
// are, against the committed bundle of real 535 and 550 sets.
func TestPlanHelpExamples(t *testing.T) {
	inCheckout(t)
	lines := examplesOf(t, "kpreload plan")
	if len(lines) != 2 {
		t.Fatalf("plan examples: %q, want two", lines)
	}
	out := runLine(t, lines[0])
	for _, want := range []string{"NVIDIA GPU 0000:00:06.0 10de:2330 (subsystem 10de:16c1, class 0x030200): NVIDIA H100 80GB HBM3",
		"nvidia: load 550.163.01 open (set 8fc8ee5187ef, testdata/plan-bundle) [latest, request applies]"} {
		if !strings.Contains(out, want) {
			t.Errorf("%s printed\n%s\nwant %q", lines[0], out, want)
		}
	}
	var res planJSON
	if err := json.Unmarshal([]byte(runLine(t, lines[1])), &res); err != nil || res.Selection == nil {
		t.Fatalf("%s: %v", lines[1], err)
	}
	if len(res.GPUs) != 1 || res.GPUs[0].Name != "NVIDIA H200" || len(res.Drivers) != 1 || res.Drivers[0].Chosen == nil ||
		chosenText(&res.Drivers[0]) != "nvidia 550.163.01 open" || res.Request.CUDA != "12.4" {
		t.Errorf("%s: %+v, want the H200 and nvidia 550.163.01 open for CUDA 12.4", lines[1], res.Selection)
	}
}

// TestREADMEPlanExample runs the README's `kpreload plan` example exactly as
// written in a checkout and compares what it prints with what the README
// shows, line for line.
func TestREADMEPlanExample(t *testing.T) {
	b, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(b), "\n$ kpreload plan ")
	if !ok {
		t.Fatal("README.md has no `$ kpreload plan` example")
	}
	block, _, _ = strings.Cut(block, "\n```")
	cmdLine, want, _ := strings.Cut(block, "\n")
	inCheckout(t)
	got := runLine(t, "kpreload plan "+cmdLine)
	if got != want+"\n" {
		t.Errorf("README.md: kpreload plan %s printed\n%s\nthe README shows\n%s", cmdLine, got, want)
	}
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

// TestSwitchHelpExamples runs the examples of `kpreload switch --help`
// exactly as written in a checkout (dry runs against the committed captures
// and bundle): branch 535 on the H100 is the 535 proprietary set, the only 535
// set cached; 550 open on the H200 is the 550 open set.
func TestSwitchHelpExamples(t *testing.T) {
	inCheckout(t)
	lines := examplesOf(t, "kpreload switch")
	if len(lines) != 2 {
		t.Fatalf("switch examples: %q, want two", lines)
	}
	out := runLine(t, lines[0])
	if first, _, _ := strings.Cut(out, "\n"); first != "nvidia: 535.261.03 proprietary would be loaded (branch 535), no driver active now (dry run: nothing changed)" {
		t.Errorf("%s printed\n%s", lines[0], out)
	}
	var res switcher.Result
	if err := json.Unmarshal([]byte(runLine(t, lines[1])), &res); err != nil || res.To == nil ||
		res.To.Driver+" "+res.To.Version+" "+res.To.Flavor != "nvidia 550.163.01 open" {
		t.Errorf("%s: would switch to %+v (%v), want nvidia 550.163.01 open", lines[1], res.To, err)
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

// TestCDIGenerateHelpExamples runs the examples of `kpreload cdi generate
// --help` exactly as written, in a directory holding ./h200-root (cdiTree: the
// real H200 VM's /proc captures and a driver library): the spec names the
// H200 by index, by its real UUID and as all.
func TestCDIGenerateHelpExamples(t *testing.T) {
	root := cdiTree(t)
	t.Chdir(t.TempDir())
	if err := os.Symlink(root, "h200-root"); err != nil {
		t.Fatal(err)
	}
	lines := examplesOf(t, "kpreload cdi generate")
	if len(lines) != 2 {
		t.Fatalf("cdi generate examples: %q, want two", lines)
	}
	out := runLine(t, lines[0])
	for _, want := range []string{"kind: nvidia.com/gpu", "name: \"0\"", "name: all", "/dev/nvidia0", "580.159.04"} {
		if !strings.Contains(out, want) {
			t.Errorf("%s printed\n%s\nwant %q in it", lines[0], out, want)
		}
	}
	runLine(t, lines[1])
	b, err := os.ReadFile("h200-spec.json")
	var spec struct {
		Kind    string `json:"kind"`
		Devices []struct {
			Name string `json:"name"`
		} `json:"devices"`
	}
	if err == nil {
		err = json.Unmarshal(b, &spec)
	}
	var names []string
	for _, d := range spec.Devices {
		names = append(names, d.Name)
	}
	if err != nil || spec.Kind != "nvidia.com/gpu" || !strings.HasPrefix(strings.Join(names, " "), "0 GPU-7843b487-7c5d-bf32-e87d-73ef066a19c5 all") {
		t.Errorf("%s wrote %v: kind %q, devices %q", lines[1], err, spec.Kind, names)
	}
}
