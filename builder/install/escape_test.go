package install

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/internal/inroot/inroottest"
)

// grubHeader is the part of 00_header's grub.cfg that sets the default.
const grubHeader = "if [ \"${next_entry}\" ] ; then\n   set default=\"${next_entry}\"\nelse\n   set default=\"0\"\nfi\n"

// chrootUpdateGrub stands in for update-grub run in a chroot of the root:
// grub.cfg is 00_header's default and 09_kpreload's entries, written as a
// program inside the root would write it.
func chrootUpdateGrub(_ context.Context, root string, _ io.Writer) error {
	var b bytes.Buffer
	b.WriteString(grubHeader)
	if err := GrubEntries(&b, root, GrubEnv{BootPath: "/boot", DeviceUUID: "1234"}); err != nil {
		return err
	}
	if err := inroot.MkdirAll(root, path.Dir(GrubConfig), 0o755); err != nil {
		return err
	}
	return inroot.WriteFile(root, GrubConfig, b.Bytes(), 0o644)
}

// linkRoot lays out a small root that boots kpreload with either boot
// loader (a kernel whose module tree is empty, a stand-in /init, a cell for
// the kernel) and, beside it, a victim tree.
func linkRoot(t *testing.T) (root, victim string) {
	t.Helper()
	base := t.TempDir()
	root, victim = filepath.Join(base, "root"), filepath.Join(base, "victim")
	files := map[string]string{
		"boot/vmlinuz-" + testKernel: "kernel", "lib/modules/" + testKernel + "/modules.dep": "",
		// A kernel with its root filesystems and crc32c built in, so that its
		// (module-less) initramfs mounts the test's root (rootcheck), whatever
		// the filesystem t.TempDir is on.
		"lib/modules/" + testKernel + "/modules.builtin.modinfo": "ext4.alias=fs-ext4\x00xfs.alias=fs-xfs\x00btrfs.alias=fs-btrfs\x00crc32c_generic.alias=crypto-crc32c\x00",
		Init: "init", Cmdline: "root=UUID=x rw\n", SettingsFile: "default: newest-with-driver\n",
		CacheDir + "/index/" + testKernel + ".json": index(testKernel, true),
		"boot/efi/loader/loader.conf":               "timeout 3\n",
		"boot/efi/loader/entries/debian.conf":       "title debian\n",
		"boot/grub/grub.cfg":                        grubHeader,
		"boot/kpreload/":                            "",
		"etc/grub.d/10_linux":                       "#!/bin/sh\n",
		"etc/kernel/postinst.d/":                    "",
		"usr/sbin/update-grub":                      "",
		BootOKUnit:                                  "",
	}
	for p, s := range files {
		full := filepath.Join(root, p)
		dir := filepath.Dir(full)
		if strings.HasSuffix(p, "/") {
			dir = full
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(p, "/") {
			if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	inroottest.Victim(t, victim)
	return root, victim
}

// TestRootLinksOut runs install, the kernel hooks (postinst, postrm),
// grub-entries, refresh, what status reads and boot-ok, for both boot loaders, on roots whose /boot, /boot/efi,
// /boot/grub, /boot/kpreload, loader/entries, /etc/grub.d, /etc/kernel or
// /etc/kpreload is a link out of the root (absolute, or relative with
// "../.."), next to a victim tree: nothing there is created, changed or
// removed, and each step either succeeds inside the root or fails naming the
// path. A link to a directory inside the root (absolute: "from the root") is
// followed as in a chroot, and everything succeeds.
func TestRootLinksOut(t *testing.T) {
	links := []string{"boot", "boot/efi", "boot/grub", "boot/kpreload", "boot/efi/loader/entries", "etc/grub.d", "etc/kernel", "etc/kpreload"}
	for _, bl := range []Bootloader{GRUB, SystemdBoot} {
		for _, link := range links {
			for _, form := range []string{"absolute", "relative", "inside"} {
				t.Run(fmt.Sprintf("%s/%s/%s", bl, link, form), func(t *testing.T) {
					root, victim := linkRoot(t)
					full := filepath.Join(root, link)
					var target string
					switch form {
					case "absolute":
						target = victim
						if err := os.RemoveAll(full); err != nil {
							t.Fatal(err)
						}
					case "relative":
						target = strings.Repeat("../", strings.Count(link, "/")+1) + "victim"
						if err := os.RemoveAll(full); err != nil {
							t.Fatal(err)
						}
					case "inside":
						// The directory moved elsewhere in the root, the link
						// absolute: it means "from the root".
						target = "/moved/" + strings.ReplaceAll(link, "/", "-")
						if err := os.MkdirAll(filepath.Join(root, "moved"), 0o755); err != nil {
							t.Fatal(err)
						}
						if err := os.Rename(full, filepath.Join(root, target)); err != nil {
							t.Fatal(err)
						}
					}
					if err := os.Symlink(target, full); err != nil {
						t.Fatal(err)
					}
					// A GRUB environment block in the victim that boot-ok would
					// rewrite (next_entry names kpreload's fallback) if it followed
					// the link out; and the report that makes it act at all.
					env := "# GRUB Environment Block\nnext_entry=kpreload-distribution-" + testKernel + "\n"
					env += strings.Repeat("#", 1024-len(env))
					for _, p := range []string{"grubenv", "grub/grubenv"} {
						if err := os.MkdirAll(filepath.Dir(filepath.Join(victim, p)), 0o755); err != nil {
							t.Fatal(err)
						}
						if err := os.WriteFile(filepath.Join(victim, p), []byte(env), 0o644); err != nil {
							t.Fatal(err)
						}
					}
					if err := os.MkdirAll(filepath.Join(root, "run/kpreload"), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(root, "run/kpreload/report.json"), []byte("{}"), 0o644); err != nil {
						t.Fatal(err)
					}
					before := inroottest.Snapshot(t, victim)
					var log bytes.Buffer
					o := Options{Root: root, RootFS: testRootFS(), Bootloader: bl, Log: &log, UpdateGrub: chrootUpdateGrub}
					ctx := context.Background()
					steps := []struct {
						name string
						run  func() error
					}{
						{"install", func() error { _, err := Install(ctx, o); return err }},
						{"postinst", func() error { _, err := KernelAdded(ctx, o, testKernel); return err }},
						{"grub-entries", func() error { return GrubEntries(io.Discard, root, GrubEnv{}) }},
						{"refresh", func() error { _, err := Refresh(ctx, o); return err }},
						// What status reads of a root (builder/status reads
						// it through these, beside the report).
						{"status", func() error {
							if _, err := Kernels(root); err != nil {
								return err
							}
							_, _ = ReadSettingsOrDefaults(root)
							return nil
						}},
						{"postrm", func() error { _, err := KernelRemoved(ctx, o, testKernel); return err }},
						{"boot-ok", func() error {
							_, err := BootOK(ctx, BootOKOptions{Root: root, Report: filepath.Join(root, "run/kpreload/report.json"), EFIVars: filepath.Join(root, "efivars"), Log: &log})
							return err
						}},
					}
					for _, s := range steps {
						err := s.run()
						if got := inroottest.Snapshot(t, victim); got != before {
							t.Fatalf("%s (err %v) changed the victim tree beside the root:\nbefore\n%s\nafter\n%s\nlog:\n%s", s.name, err, before, got, log.String())
						}
						switch {
						case err == nil:
						case form == "inside":
							t.Errorf("%s through a link inside the root: %v\n%s", s.name, err, log.String())
						case !strings.Contains(err.Error(), root) && !strings.Contains(err.Error(), "/"+link):
							t.Errorf("%s: %v: want an error naming the path", s.name, err)
						}
					}
				})
			}
		}
	}
}
