package provisioner

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/kpreload/kpreload/builder/image/stage"
	"github.com/kpreload/kpreload/kmodcache/cellsign"
)

// TestSharedConfig checks the fields the provisioner shares with the builder
// (pkrcfg.Shared) that it had not had before: the remote module cache and
// the early decision reach stage.Stage, and their problems are reported as
// the builder reports them.
func TestSharedConfig(t *testing.T) {
	kpreload, initBin := fakeBinaries(t)
	keys := filepath.Join(t.TempDir(), "team")
	if _, err := cellsign.Generate(keys+".key", keys+".pub"); err != nil {
		t.Fatal(err)
	}
	const registry = "oci://127.0.0.1:5000/kpreload/cells"
	for _, tc := range []struct {
		name string
		set  map[string]interface{}
		err  string
	}{
		{"remote and early drivers", map[string]interface{}{"remote": registry, "plain_http": true, "remote_trust": []string{keys + ".pub"}, "early_drivers": true}, ""},
		{"remote without trusted keys", map[string]interface{}{"remote": registry, "plain_http": true}, "without remote_trust: the image's drivers would be taken from the registry unsigned"},
		{"not oci", map[string]interface{}{"remote": "https://registry.example.com/cells"}, `remote: remote "https://registry.example.com/cells": want oci://HOST[:PORT]/REPO`},
		{"plain_http alone", map[string]interface{}{"plain_http": true}, "plain_http, remote_trust, remote_sign and allow_unsigned are set but remote is not"},
		{"a public key to sign with", map[string]interface{}{"remote": registry, "remote_sign": keys + ".pub", "allow_unsigned": true}, "remote_sign: signing key"},
		{"instance file is a directory", map[string]interface{}{"instance_file": t.TempDir()}, "is a directory, want an instance YAML file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := map[string]interface{}{
				"kernels": []string{testKernel}, "recipes": []string{"testdriver"}, "recipes_dir": recipesDir,
				"kpreload_binary": kpreload, "init_binary": initBin, "cache_dir": t.TempDir(),
			}
			for k, v := range tc.set {
				raw[k] = v
			}
			p := &Provisioner{}
			err := p.Prepare(raw)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Prepare error = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Prepare: %v", err)
			}
			var staged stage.Options
			p.stage = fakeStage(t, &staged)
			comm := &recordingComm{MockCommunicator: new(packersdk.MockCommunicator)}
			if err := p.Provision(context.Background(), packersdk.TestUi(t), comm, nil); err != nil {
				t.Fatalf("Provision: %v", err)
			}
			if staged.Remote == nil || staged.Remote.String() != registry {
				t.Errorf("stage options' Remote = %v, want %s", staged.Remote, registry)
			}
			if !staged.EarlyDrivers || !staged.BuildMissing {
				t.Errorf("stage options EarlyDrivers = %v, BuildMissing = %v, want both", staged.EarlyDrivers, staged.BuildMissing)
			}
		})
	}
}
