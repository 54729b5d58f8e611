package provisioner

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/kpreload/kpreload/builder/image"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestProvisionEarlyDrivers installs into a target root with early_drivers
// (a pkrcfg.Shared field the builder had alone before): real stage.Stage,
// dkms and install script; the target is marked for the kernel hook and
// `kpreload install` builds the initramfs with the driver set, a complete
// index and the instance file.
func TestProvisionEarlyDrivers(t *testing.T) {
	if testing.Short() {
		t.Skip("real dkms build and initramfs; -short")
	}
	kpreload, initBin := staticBinaries(t)
	target := kernelTarget(t)
	p := &Provisioner{}
	if err := p.Prepare(map[string]interface{}{
		"kernels": []string{testKernel}, "recipes": []string{"testdriver"}, "recipes_dir": recipesDir,
		"cache_dir": moduleCache(t), "kpreload_binary": kpreload, "init_binary": initBin,
		"instance_file": "../../../images/instance-example.yaml", "early_drivers": true,
		"target_root": target, "remote_staging_directory": filepath.Join(t.TempDir(), "staging"),
		"kernel_cmdline": "root=UUID=0b0e0f0a-1111-4222-8333-444444444444 rw console=ttyS0",
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := p.Provision(ctx, packersdk.TestUi(t), localComm{}, nil); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if _, err := os.Stat(filepath.Join(target, image.ImageEarlyDrivers)); err != nil {
		t.Errorf("the target is not marked for the kernel hook: %v", err)
	}
	files := testenv.InitramfsFiles(t, filepath.Join(target, image.ImageInitramfsDir, "initrd.img-"+testKernel))
	ix := files["lib/modules/"+testKernel+"/kpreload.index.json"]
	if !strings.Contains(ix, `"complete":true`) || !strings.Contains(ix, "kpreload-edu") || files["etc/kpreload/instance.yaml"] == "" {
		t.Errorf("initramfs index %.300s (instance %q): want complete, with the kpreload-edu set, and the instance file", ix, files["etc/kpreload/instance.yaml"])
	}
}
