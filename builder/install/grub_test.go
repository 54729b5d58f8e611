package install

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDistributionGrubHook(t *testing.T) {
	setup := func(t *testing.T, hook bool, mode os.FileMode, grubCfg, container bool) string {
		t.Helper()
		root := t.TempDir()
		files := map[string]os.FileMode{"usr/sbin/update-grub": 0o755}
		if hook {
			files["etc/kernel/postinst.d/zz-update-grub"] = mode
			files["etc/kernel/postrm.d/zz-update-grub"] = mode
		}
		if grubCfg {
			files[GrubConfig] = 0o644
		}
		if container {
			files["run/systemd/container"] = 0o644
		}
		for p, m := range files {
			if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, p), nil, m); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	env := func(params string) func(string) string {
		return func(k string) string {
			if k == "DEB_MAINT_PARAMS" {
				return params
			}
			return ""
		}
	}
	tests := []struct {
		name                string
		hook                bool
		mode                os.FileMode
		grubCfg, container  bool
		phase, params, want string
	}{
		{"apt install", true, 0o755, true, false, "postinst", "'configure' '6.1.0-56-cloud-amd64'", "/etc/kernel/postinst.d/zz-update-grub"},
		{"no maintainer params", true, 0o755, true, false, "postinst", "", "/etc/kernel/postinst.d/zz-update-grub"},
		{"apt remove", true, 0o755, true, false, "postrm", "'remove'", "/etc/kernel/postrm.d/zz-update-grub"},
		{"purge: grub2-common's hook does not run", true, 0o755, true, false, "postrm", "'purge'", ""},
		{"abort-upgrade", true, 0o755, true, false, "postinst", "'abort-upgrade' '1'", ""},
		{"no hook", false, 0, true, false, "postinst", "", ""},
		{"hook not executable", true, 0o644, true, false, "postinst", "", ""},
		{"no grub.cfg yet", true, 0o755, false, false, "postinst", "", ""},
		{"a container", true, 0o755, true, true, "postinst", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := setup(t, tt.hook, tt.mode, tt.grubCfg, tt.container)
			if got := DistributionGrubHook(root, tt.phase, env(tt.params)); got != tt.want {
				t.Errorf("DistributionGrubHook = %q, want %q", got, tt.want)
			}
		})
	}
}
