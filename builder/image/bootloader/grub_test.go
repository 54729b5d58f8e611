package bootloader

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/internal/sandbox"
)

// fakeGrub stands in for the root's GRUB tools: grub-mkimage writes the
// core image it is asked for, grub-mkconfig records the grub-probe it ran
// beside and writes the configuration.
type fakeGrub struct {
	t     *testing.T
	fail  string // "mkimage" or "mkconfig"
	probe string
	dev   []sandbox.Link // the links grub-mkconfig found in /dev
}

func (g *fakeGrub) MkImage(_ context.Context, root string, args ...string) error {
	if g.fail == "mkimage" {
		return errors.New("fake failure")
	}
	i := slices.Index(args, "-o")
	return os.WriteFile(filepath.Join(root, args[i+1]), []byte("core"), 0o644)
}

func (g *fakeGrub) MkConfig(_ context.Context, root, out string, dev []sandbox.Link) error {
	g.dev = dev
	if g.fail == "mkconfig" {
		return errors.New("fake failure")
	}
	b, err := os.ReadFile(filepath.Join(root, "usr/sbin/grub-probe"))
	g.probe = string(b)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, out), []byte("menuentry 'fake' {}\n"), 0o644)
}

// grubRoot makes a root with what a GRUB image's packages bring: GRUB's
// modules, grub-probe and grub-mkrelpath, shim and the signed GRUB.
func grubRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for p, s := range map[string]string{
		"usr/lib/grub/i386-pc/normal.mod":    "",
		"usr/lib/grub/i386-pc/moddep.lst":    "",
		"usr/lib/grub/x86_64-efi/normal.mod": "",
		"usr/sbin/grub-probe":                "real grub-probe",
		"usr/bin/grub-mkrelpath":             "real grub-mkrelpath",
		"boot/grub/.keep":                    "",
		"dev/.keep":                          "",
		ShimImage:                            "shim",
		MokManager:                           "mm",
		SignedGrub:                           "grub",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestGrubFilesPlain sets up a plain image's GRUB with fake GRUB tools: the
// root's /etc/default/grub carries the command line, GRUB's modules are
// copied to /boot/grub, grub-mkconfig runs with the build's grub-probe
// (the real one back afterwards), and the ESP gets shim, the signed GRUB and
// its grub.cfg; a missing piece is an error naming it.
func TestGrubFilesPlain(t *testing.T) {
	ctx := context.Background()
	const uuid = "0b0e0f0a-1111-4222-8333-444444444444"
	root, work := grubRoot(t), t.TempDir()
	g := &fakeGrub{t: t}
	esp, core, err := GrubFiles(ctx, g, work, root, uuid, " console=ttyS0 ", false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := core, filepath.Join(work, "core.img"); got != want {
		t.Errorf("core = %q, want %q", got, want)
	}
	var dsts []string
	for _, f := range esp {
		dsts = append(dsts, f.Dst)
		if _, err := os.Stat(f.Src); err != nil {
			t.Errorf("ESP file %s: %v", f.Dst, err)
		}
	}
	if got, want := strings.Join(dsts, " "), "EFI/BOOT/BOOTX64.EFI EFI/BOOT/grubx64.efi EFI/BOOT/mmx64.efi EFI/debian/grub.cfg"; got != want {
		t.Errorf("ESP files %q, want %q", got, want)
	}
	def, _ := os.ReadFile(filepath.Join(root, "etc/default/grub"))
	if !strings.Contains(string(def), `GRUB_CMDLINE_LINUX="console=ttyS0"`) {
		t.Errorf("/etc/default/grub = %q, want the command line", def)
	}
	if !strings.Contains(g.probe, "fs_uuid) echo "+uuid) {
		t.Errorf("grub-probe while grub-mkconfig ran = %q, want the build's answer for %s", g.probe, uuid)
	}
	// 10_linux names the root by UUID: /dev/disk/by-uuid has it, leading to
	// the device grub-probe names.
	links := map[string]string{}
	for _, l := range g.dev {
		links[l.Path] = l.Target
	}
	if links["/dev/disk/by-uuid/"+uuid] != "../../kpreload-root" || links["/dev/kpreload-root"] == "" {
		t.Errorf("/dev links while grub-mkconfig ran = %+v, want /dev/disk/by-uuid/%s leading to /dev/kpreload-root", g.dev, uuid)
	}
	for p, want := range map[string]string{"usr/sbin/grub-probe": "real grub-probe", "usr/bin/grub-mkrelpath": "real grub-mkrelpath", "boot/grub/i386-pc/normal.mod": "", "boot/grub/x86_64-efi/normal.mod": ""} {
		if got, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(got) != want {
			t.Errorf("%s = %q (%v), want %q", p, got, err, want)
		}
	}
	for _, p := range []string{"dev/disk", "dev/kpreload-root", grubBuildDir} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			t.Errorf("%s left in the root", p)
		}
	}

	for _, tt := range []struct {
		name, fail, remove, wantErr string
	}{
		{"grub-mkimage fails", "mkimage", "", "GRUB i386-pc image"},
		{"grub-mkconfig fails", "mkconfig", "", "fake failure"},
		{"no BIOS modules", "", "usr/lib/grub/i386-pc", "GRUB i386-pc: no modules"},
		{"no shim", "", ShimImage, "UEFI boot through shim"},
	} {
		root := grubRoot(t)
		if tt.remove != "" {
			os.RemoveAll(filepath.Join(root, tt.remove))
		}
		if _, _, err := GrubFiles(ctx, &fakeGrub{t: t, fail: tt.fail}, t.TempDir(), root, uuid, "", false); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: err = %v, want %q", tt.name, err, tt.wantErr)
		}
	}
}
