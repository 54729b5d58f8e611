package imagecmd

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/image"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

func TestImageBuildHelp(t *testing.T) {
	code, out, _ := runCLI("image", "build", "--help")
	if code != 0 {
		t.Fatalf("image build --help: exit %d", code)
	}
	for _, want := range []string{"--name", "--kernel", "--recipe", "--cache", "--out", "--instance", "--cmdline", "--json", "--build-missing", "mmdebstrap", "zz-kpreload", "Example",
		"--format", "raw, qcow2, vhd, vmdk, gce", "NAME.tar.gz", "streamOptimized", "boot_firmware", "secure_boot"} {
		if !strings.Contains(out, want) && !strings.Contains(out, strings.TrimPrefix(want, "--")) {
			t.Errorf("help lacks %q", want)
		}
	}
}

func TestImageBuildBadArgs(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	recipes, err := filepath.Abs("../../../../recipes")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	common := []string{"--kpreload-binary", bin, "--init", bin, "--out", out, "--recipes", recipes}
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"no name", []string{"--kernel", "6.1.0-56-cloud-amd64"}, []string{"--name is required"}},
		{"no kernel", []string{"--name", "x"}, []string{"--kernel is required"}},
		{"unknown recipe", []string{"--name", "x", "--kernel", "6.1.0-56-cloud-amd64", "--recipe", "nope"}, []string{"recipe nope", "testdriver"}},
		// Before anything else (the recipe is not even looked up): every valid name listed.
		{"bad format", []string{"--name", "x", "--kernel", "6.1.0-56-cloud-amd64", "--recipe", "nope", "--format", "vmdk,vpc"},
			[]string{`--format: format "vpc": want one of raw, qcow2, vhd, vmdk, gce`}},
		{"format twice", []string{"--name", "x", "--kernel", "6.1.0-56-cloud-amd64", "--format", "gce", "--format", "gce"}, []string{"format gce given twice"}},
		// The real apt archive: an unknown kernel lists what is available.
		{"unknown kernel", []string{"--name", "x", "--kernel", "6.1.0-999-cloud-amd64"}, []string{"unknown kernel 6.1.0-999-cloud-amd64", "available:", "6.1.0-56-cloud-amd64"}},
		// An empty cache: the missing cell is named with what the cache holds.
		{"missing cell", []string{"--name", "x", "--kernel", "6.1.0-56-cloud-amd64", "--recipe", "testdriver", "--cache", filepath.Join(dir, "cache")},
			[]string{"module cache lacks cells", "testdriver (kpreload-edu 1.0.0 open) for 6.1.0-56-cloud-amd64", "holds: nothing", "--build-missing"}},
	} {
		// These two read the archive's bookworm package lists (an apt-get update on a fresh machine).
		if archive := c.name == "unknown kernel" || c.name == "missing cell"; archive && testing.Short() {
			t.Logf("%s: not in the unit tier (-short): reads the archive's bookworm package lists", c.name)
			continue
		}
		code, _, errOut := runCLI(append(append([]string{"image", "build"}, common...), c.args...)...)
		if code == 0 {
			t.Errorf("%s: exit 0, want failure", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%s: stderr %q lacks %q", c.name, errOut, w)
			}
		}
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("failed builds left %d entries in %s", len(ents), out)
	}
}

// TestImageBuildDryRunInProcess: image build --dry-run checks the options
// and the recipes and prints what it would write and its phases, in this
// process (the examples' test runs the built binary).
func TestImageBuildDryRunInProcess(t *testing.T) {
	recipes := filepath.Join(testenv.RepoRoot(t), "recipes")
	out := t.TempDir()
	common := []string{"image", "build", "--name", "ci", "--kernel", "6.1.0-56-cloud-amd64", "--recipe", "testdriver", "--recipes", recipes,
		"--kpreload-binary", os.Args[0], "--init", os.Args[0], "--out", out, "--cache", t.TempDir(), "--dry-run"}
	text, _ := cli.MustRun(t, 0, common...)
	clitest.WantIn(t, "image build --dry-run", text, "image ci: Debian ", "recipes testdriver", "would write "+filepath.Join(out, "ci.raw"), "dry run: nothing built")
	js, _ := cli.MustRun(t, 0, append(common, "--json", "--format", "vmdk")...)
	var p imagePlan
	if err := json.Unmarshal([]byte(js), &p); err != nil || p.Name != "ci" || len(p.Outputs) != 2 || len(p.Phases) == 0 {
		t.Errorf("image build --dry-run --json = %q (%v), want the plan of ci: a vmdk and the manifest, its phases", js, err)
	}
	_, errOut := cli.MustRun(t, 1, append(common, "--instance", filepath.Join(out, "absent.yaml"))...)
	clitest.WantIn(t, "image build --dry-run --instance absent", errOut, "instance file", "absent.yaml")
	bad := filepath.Join(out, "bad.yaml")
	if err := os.WriteFile(bad, []byte("resources:\n  driver:\n    flavour: open\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut = cli.MustRun(t, 1, append(common, "--instance", bad)...)
	clitest.WantIn(t, "image build --dry-run --instance bad.yaml", errOut, "--instance: ", "bad.yaml")
	_, errOut = cli.MustRun(t, 1, "image", "build", "--name", "ci", "--kernel", "6.1.0-56-cloud-amd64", "--add", "nodest", "--dry-run")
	clitest.WantIn(t, "image build --add nodest", errOut, `--add "nodest": want DEST=SRC`)
	_, errOut = cli.MustRun(t, 1, "image", "build", "--kernel", "6.1.0-56-cloud-amd64", "--dry-run")
	clitest.WantIn(t, "image build without --name", errOut, "--name is required")
	_, errOut = cli.MustRun(t, 1, "image", "build", "--name", "ci", "--dry-run")
	clitest.WantIn(t, "image build without --kernel", errOut, "--kernel is required")
	_, errOut = cli.MustRun(t, 1, "image", "build", "--name", "ci", "--kernel", "k", "--bootloader", "lilo", "--dry-run")
	clitest.WantIn(t, "image build --bootloader lilo", errOut, "lilo")
}

// TestImageBuildHelpExamples runs the examples of image build exactly as
// written, with kpreload and kpreload-init built beside each other as make
// builds them, in a directory holding recipes/ and images/ of this checkout:
// each prints the files it would write and writes none.
func TestImageBuildHelpExamples(t *testing.T) {
	repo, err := filepath.Abs("../../../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	kpreload := testenv.GoBuildStatic(t, bin, "kpreload", "./cmd/kpreload")
	testenv.GoBuildStatic(t, bin, "kpreload-init", "./cmd/kpreload-init")
	t.Chdir(t.TempDir())
	for _, d := range []string{"recipes", "images"} {
		if err := os.Symlink(filepath.Join(repo, d), d); err != nil {
			t.Fatal(err)
		}
	}
	lines := cli.ExamplesOf(t, "kpreload image build")
	want := []string{"out/images/ci.raw, out/images/ci.qcow2, out/images/ci.manifest.json", "gpu.vmdk, gpu.vhd, gpu.tar.gz, gpu.manifest.json", `"gpu.raw",`}
	for i, l := range lines {
		out, err := exec.Command(kpreload, strings.Fields(l)[1:]...).Output()
		if err != nil {
			t.Fatalf("example %q: %v\n%s", l, err, out)
		}
		if i < len(want) && !strings.Contains(string(out), want[i]) {
			t.Errorf("example %q printed\n%s\nwant %q in it", l, out, want[i])
		}
	}
	if ents, err := os.ReadDir("."); err != nil || len(ents) != 2 {
		t.Errorf("the examples left %v (%v) beside recipes/ and images/", ents, err)
	}
	if len(lines) != len(want) {
		t.Errorf("image build examples %q; the test knows %d", lines, len(want))
	}
}

// TestPrintImageManifest: the summary image build prints of its manifest.
func TestPrintImageManifest(t *testing.T) {
	m := &image.Manifest{Name: "ci", Seconds: 42, RootUUID: "5f1d2c3b", Kernels: []string{"6.1.0-56-cloud-amd64"},
		KernelPackages: map[string]string{"6.1.0-56-cloud-amd64": "linux-image-6.1.0-56-cloud-amd64 6.1.158-1"},
		Files:          []image.File{{Format: "qcow2", Path: "out/ci.qcow2", Size: 1024, SHA256: "ab12"}},
		Drivers:        []image.Driver{{Driver: "testdriver", Version: "1.0", Kernel: "6.1.0-56-cloud-amd64", SetID: "0123456789abcdef0123"}},
		Cmdline:        "console=ttyS0", BootFirmware: []string{"bios", "uefi"}}
	var b bytes.Buffer
	printImageManifest(&b, m, "out")
	want := "image ci built in 42s (root UUID 5f1d2c3b)\n" +
		"  qcow2  out/ci.qcow2  1024 bytes  sha256 ab12\n" +
		"  manifest out/ci.manifest.json\n" +
		"  kernel 6.1.0-56-cloud-amd64 (linux-image-6.1.0-56-cloud-amd64 6.1.158-1)\n" +
		"  driver testdriver 1.0  for 6.1.0-56-cloud-amd64: set 0123456789abcdef\n" +
		"  cmdline console=ttyS0\n" +
		"  boots under bios and uefi (secure boot: false)\n"
	if got := b.String(); got != want {
		t.Errorf("printImageManifest =\n%s\nwant\n%s", got, want)
	}
}

// TestImageBuildRemoteNeedsTrust: image build --remote without --trust is
// refused before anything is done, unless --allow-unsigned.
func TestImageBuildRemoteNeedsTrust(t *testing.T) {
	base := []string{"image", "build", "--name", "x", "--kernel", "6.1.0-56-cloud-amd64", "--out", t.TempDir()}
	code, _, stderr := runCLI(append(base, "--remote", "oci://127.0.0.1:1/cells", "--plain-http")...)
	if code == 0 || !strings.Contains(stderr, "without --trust") || !strings.Contains(stderr, "--allow-unsigned") {
		t.Errorf("image build --remote without --trust = exit %d, %q; want a refusal naming --trust and --allow-unsigned", code, stderr)
	}
	code, _, stderr = runCLI(append(base, "--allow-unsigned")...)
	if code == 0 || !strings.Contains(stderr, "--allow-unsigned needs --remote") {
		t.Errorf("image build --allow-unsigned without --remote = exit %d, %q; want a refusal", code, stderr)
	}
}
