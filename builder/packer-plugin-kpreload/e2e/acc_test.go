package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/packer-plugin-sdk/acctest"
)

// TestAccKpreloadBuilder is the SDK-style acceptance test (run with
// PACKER_ACC=1, as the SDK's acctest.TestPlugin requires): a `packer build`
// of a small kpreload source with the test driver, checked through Packer's
// log and the files it reports. TestBuildAndBootCITestdriver runs the same
// build (plus a boot) without PACKER_ACC, in `make test`.
func TestAccKpreloadBuilder(t *testing.T) {
	if os.Getenv(acctest.TestEnvVar) == "" {
		t.Skipf("acceptance test: set %s=1 to run it", acctest.TestEnvVar)
	}
	root := repoRoot(t)
	packer := packerBinary(t)
	pluginDir := plugins(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	// acctest.TestPlugin writes the template and Packer's log into the working
	// directory and finds packer on $PATH.
	t.Chdir(dir)
	t.Setenv("PATH", filepath.Dir(packer)+string(os.PathListSeparator)+os.Getenv("PATH"))
	// The plugin as plugins installed it (packer plugins install --path);
	// it runs in dir, so kpreload_binary and init_binary name the
	// repository's bin/ (make plugin) that it finds by default from the root.
	t.Setenv("PACKER_PLUGIN_PATH", filepath.Join(pluginDir, "plugins"))
	t.Setenv("PACKER_CONFIG_DIR", filepath.Join(pluginDir, "config"))
	t.Setenv("CHECKPOINT_DISABLE", "1")

	acctest.TestPlugin(t, &acctest.PluginTestCase{
		Name: "kpreload_builder_testdriver",
		Type: "kpreload",
		Template: fmt.Sprintf(`
source "kpreload" "acc" {
  name             = "acc"
  output_directory = %q
  kernels          = ["6.1.0-56-cloud-amd64"]
  recipes          = ["testdriver"]
  recipes_dir      = %q
  cache_dir        = %q
  kernel_cmdline   = "console=ttyS0"
  kpreload_binary  = %q
  init_binary      = %q
  disk_size        = "1536M"
  esp_size         = "128M"
  formats          = ["qcow2"]
}
build { sources = ["source.kpreload.acc"] }
`, out, filepath.Join(root, "recipes"), filepath.Join(dir, "cache"),
			filepath.Join(root, "bin", "kpreload"), filepath.Join(root, "bin", "kpreload-init")),
		Check: func(cmd *exec.Cmd, logfile string) error {
			if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 0 {
				return fmt.Errorf("packer build failed: %v", cmd.ProcessState)
			}
			log, err := os.ReadFile(logfile)
			if err != nil {
				return err
			}
			if !strings.Contains(string(log), "Image acc built") {
				return fmt.Errorf("packer log %s lacks the builder's completion line", logfile)
			}
			for _, f := range []string{"acc.qcow2", "acc.manifest.json"} {
				if _, err := os.Stat(filepath.Join(out, f)); err != nil {
					return fmt.Errorf("artifact file: %w", err)
				}
			}
			if _, err := os.Stat(filepath.Join(out, "acc.raw")); !os.IsNotExist(err) {
				return fmt.Errorf("acc.raw exists (stat: %v), want only the qcow2 (formats = [\"qcow2\"])", err)
			}
			return nil
		},
	})
}
