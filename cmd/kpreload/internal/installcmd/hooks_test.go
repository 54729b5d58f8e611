package installcmd

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/install"
)

// treeOf lists root's paths with their sizes: what a command left there.
func treeOf(t *testing.T, root string) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		got[p] = fi.Size()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestPackagedHooksInert: on a root kpreload install never made boot
// kpreload (a host where only the package is installed), the hooks the
// package ships (postinst, postrm, GRUB's script) exit 0, print nothing and
// leave the root as it was; once the root is installed they act.
func TestPackagedHooksInert(t *testing.T) {
	const k = "6.1.0-56-cloud-amd64"
	root := t.TempDir()
	for p, s := range map[string]string{
		"boot/vmlinuz-" + k: "k", "lib/modules/" + k + "/modules.dep": "", "boot/grub/grub.cfg": "# Debian's\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hooks := [][]string{
		{"kernel-hook", "postinst", k, "/boot/vmlinuz-" + k, "--root", root},
		{"kernel-hook", "postrm", k, "/boot/vmlinuz-" + k, "--root", root},
		{"kernel-hook", "grub-entries", "--root", root},
	}
	before := treeOf(t, root)
	for _, args := range hooks {
		code, out, errOut := runCLI(args...)
		if code != 0 || out != "" || errOut != "" {
			t.Errorf("%q before kpreload install: exit %d, stdout %q, stderr %q; want 0 and silence", args, code, out, errOut)
		}
	}
	after := treeOf(t, root)
	if len(after) != len(before) {
		t.Errorf("the hooks changed the root before kpreload install:\nbefore %v\nafter  %v", before, after)
	}
	// A bad release is still refused before anything else.
	if code, _, errOut := runCLI("kernel-hook", "postinst", "../x", "--root", root); code == 0 || !strings.Contains(errOut, "starts with '.'") {
		t.Errorf("postinst ../x: exit %d, %q; want the release refused", code, errOut)
	}
	// Installed: the postinst hook acts (and here fails: the root has no
	// /init for the initramfs), grub-entries prints the entry.
	if err := os.MkdirAll(filepath.Join(root, install.InitramfsDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCLI(hooks[0]...); code == 0 && out == "" && errOut == "" {
		t.Errorf("postinst on an installed root did nothing: exit 0, no output")
	}
	if err := os.WriteFile(filepath.Join(root, install.InitramfsPath(k)), []byte("i"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCLI(hooks[2]...); code != 0 || !strings.Contains(out, "menuentry '") {
		t.Errorf("grub-entries on an installed root: exit %d\nstdout %s\nstderr %s\nwant 0 and kpreload's entry", code, out, errOut)
	}
}
