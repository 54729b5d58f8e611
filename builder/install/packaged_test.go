package install

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInstalled(t *testing.T) {
	root := t.TempDir()
	if Installed(root) {
		t.Errorf("Installed(empty root) = true, want false")
	}
	if err := os.MkdirAll(filepath.Join(root, InitramfsDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if !Installed(root) {
		t.Errorf("Installed(root with %s) = false, want true", InitramfsDir)
	}
	// /boot is a file: the hook goes on, to report it.
	unreadable := t.TempDir()
	if err := os.WriteFile(filepath.Join(unreadable, "boot"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !Installed(unreadable) {
		t.Errorf("Installed(root whose /boot is a file) = false, want true")
	}
}

// TestPackagedHooks: the package ships what WriteHooks writes, each hook
// handing over to the kpreload CLI (which decides whether to act).
func TestPackagedHooks(t *testing.T) {
	got := PackagedHooks()
	want := map[string]string{PostinstHook: "kernel-hook postinst", PostrmHook: "kernel-hook postrm", GrubScript: "kernel-hook grub-entries", PackagedKernelInstallPlugin: "kernel-hook postinst"}
	if len(got) != len(want) {
		t.Errorf("PackagedHooks has %d files, want %d", len(got), len(want))
	}
	for p, w := range want {
		if !strings.HasPrefix(got[p], "#!/bin/sh\n") || !strings.Contains(got[p], "exec /usr/bin/kpreload "+w) {
			t.Errorf("PackagedHooks()[%s] = %q, want a shell script that execs kpreload %s", p, got[p], w)
		}
	}
}
