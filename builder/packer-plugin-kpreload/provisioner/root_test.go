package provisioner

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/image"
	"github.com/kpreload/kpreload/internal/inroot/inroottest"
)

// TestInstallScriptRootLinksOut runs the real install script (without the
// kernel hook) on target roots whose /etc/kpreload, /etc/kernel or /usr/bin
// is a link out of the root, absolute or relative, next to a victim tree:
// nothing outside the root is created, changed or removed, and the script
// fails naming the path. A link inside the root is followed there.
func TestInstallScriptRootLinksOut(t *testing.T) {
	kpreload := staticBinary(t, "kpreload", "./cmd/kpreload")
	tree := t.TempDir()
	for p, s := range map[string]string{
		image.ImageKpreload: "", "etc/kpreload/instance.yaml": "instance\n", image.ImagePostinstHook: "#!/bin/sh\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(tree, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if s == "" {
			if out, err := exec.Command("cp", kpreload, filepath.Join(tree, p)).CombinedOutput(); err != nil {
				t.Fatalf("cp: %v\n%s", err, out)
			}
			continue
		}
		if err := os.WriteFile(filepath.Join(tree, p), []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	archive := filepath.Join(t.TempDir(), ArchiveName)
	if _, err := writeArchive(archive, tree); err != nil {
		t.Fatal(err)
	}
	for _, link := range []string{"etc/kpreload", "etc/kernel", "usr/bin"} {
		for _, form := range []string{"absolute", "relative", "inside"} {
			t.Run(link+"/"+form, func(t *testing.T) {
				base := t.TempDir()
				root, victim, staging := filepath.Join(base, "root"), filepath.Join(base, "victim"), filepath.Join(base, "staging")
				inroottest.Victim(t, victim)
				target := map[string]string{"absolute": victim, "relative": strings.Repeat("../", strings.Count(link, "/")+1) + "victim", "inside": "/moved"}[form]
				for _, d := range []string{filepath.Dir(filepath.Join(root, link)), filepath.Join(root, "moved"), staging} {
					if err := os.MkdirAll(d, 0o755); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
					t.Fatal(err)
				}
				if out, err := exec.Command("cp", archive, staging).CombinedOutput(); err != nil {
					t.Fatalf("cp: %v\n%s", err, out)
				}
				before := inroottest.Snapshot(t, victim)
				out, err := exec.Command("sh", "-c", InstallScript(root, staging, nil, nil, false)).CombinedOutput()
				if got := inroottest.Snapshot(t, victim); got != before {
					t.Fatalf("the install script (%v) changed the victim tree beside the root:\nbefore\n%s\nafter\n%s\n%s", err, before, got, out)
				}
				switch {
				case form == "inside":
					if err != nil {
						t.Fatalf("install script through a link inside the root: %v\n%s", err, out)
					}
					if ents, err := os.ReadDir(filepath.Join(root, "moved")); err != nil || len(ents) == 0 {
						t.Errorf("nothing copied through the link inside the root (%v)", err)
					}
				case err == nil:
					t.Errorf("install script with %s a link out: succeeded, want a failure naming it\n%s", link, out)
				case !strings.Contains(string(out), filepath.Join(root, link)):
					t.Errorf("install script failed without naming %s:\n%s", filepath.Join(root, link), out)
				}
			})
		}
	}
}
