package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runCLI runs the kpreload command line and returns its exit status and output.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Execute(args, &o, &e)
	return code, o.String(), e.String()
}

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
	recipes, err := filepath.Abs("../../../recipes")
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
