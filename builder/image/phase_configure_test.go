package image

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigurePhase runs the configure phase: fstab names the build's root
// and ESP, the SSH host keys are gone and the units asked for are enabled.
func TestConfigurePhase(t *testing.T) {
	f := &fakeRunner{}
	j, _ := fakeJob(t, f, nil)
	if err := runThrough(t, j, PhaseConfigure); err != nil {
		t.Fatal(err)
	}
	fstab, err := os.ReadFile(filepath.Join(j.root, "etc/fstab"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{j.m.RootUUID, j.m.ESPUUID} {
		if !strings.Contains(string(fstab), id) {
			t.Errorf("fstab %q lacks %s", fstab, id)
		}
	}
	if _, err := os.Lstat(filepath.Join(j.root, "etc/ssh/ssh_host_ed25519_key")); !os.IsNotExist(err) {
		t.Errorf("the root filesystem's SSH host key is still there (%v)", err)
	}
	if len(f.ran("systemctl --root="+j.root+" enable extra.service")) == 0 {
		t.Errorf("extra.service not enabled; ran:\n%s", strings.Join(f.cmds, "\n"))
	}
}
