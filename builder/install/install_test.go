package install

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
	"github.com/kpreload/kpreload/testsupport/treetest"
)

const testKernel = "6.1.0-56-cloud-amd64"

// fakeRoot builds a root under t.TempDir from path -> content (a path ending
// in "/" makes a directory).
func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	treetest.Write(t, root, files)
	return root
}

// index returns a boot index naming one driver set (or none) for kernel.
func index(kernel string, driver bool) string {
	sets := `[{"id":"kernel","dir":"x","modules":[]}]`
	if driver {
		sets = `[{"id":"kernel","dir":"x","modules":[]},{"id":"abc","driver":"kpreload-edu","version":"1.0","dir":"y","modules":[]}]`
	}
	return `{"format":1,"kernel":"` + kernel + `","sets":` + sets + `}`
}

func TestCheckRelease(t *testing.T) {
	for _, c := range []struct {
		in string
		ok bool
	}{
		{"6.1.0-56-cloud-amd64", true},
		{"6.12.117+deb12-cloud-amd64", true},
		{"5.10.0~rc1", true},
		{"", false},
		{"..", false},
		{"-rf", false},
		{"6.1/../../etc", false},
		{"6.1 x", false},
		{"6.1'$(reboot)'", false},
		{strings.Repeat("a", 129), false},
	} {
		if got := CheckRelease(c.in) == nil; got != c.ok {
			t.Errorf("CheckRelease(%q) ok = %v, want %v", c.in, got, c.ok)
		}
	}
}

func TestDetect(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		want  Bootloader
	}{
		{"grub", map[string]string{"usr/sbin/grub-mkconfig": "", "boot/grub/grub.cfg": ""}, GRUB},
		{"grub installed, no grub.cfg yet", map[string]string{"usr/sbin/update-grub": ""}, GRUB},
		{"systemd-boot", map[string]string{"boot/efi/loader/loader.conf": ""}, SystemdBoot},
		{"grub tools beside systemd-boot", map[string]string{"usr/sbin/grub-mkconfig": "", "boot/efi/loader/loader.conf": ""}, SystemdBoot},
		{"grub.cfg beside an ESP loader/", map[string]string{"usr/sbin/grub-mkconfig": "", "boot/grub/grub.cfg": "", "boot/efi/loader/": ""}, GRUB},
		{"none: an ESP with shim only", map[string]string{"boot/efi/EFI/debian/shimx64.efi": ""}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := fakeRoot(t, c.files)
			got, err := Detect(root, filepath.Join(root, ESPMount))
			if got != c.want {
				t.Errorf("Detect = %q (err %v), want %q", got, err, c.want)
			}
			var nb *NoBootloaderError
			if c.want == "" && (!errors.As(err, &nb) || !strings.Contains(err.Error(), "usr/sbin/grub-mkconfig") || !strings.Contains(err.Error(), "boot/efi/loader/")) {
				t.Errorf("Detect error = %v, want one naming what it looked for", err)
			}
		})
	}
}

func TestDefaultKernel(t *testing.T) {
	old, newer := "6.1.0-56-cloud-amd64", "6.12.117+deb12-cloud-amd64"
	root := fakeRoot(t, map[string]string{
		"boot/vmlinuz-" + old: "k", InitramfsPath(old): "i", CacheDir + "/index/" + old + ".json": index(old, true),
		"boot/vmlinuz-" + newer: "k", InitramfsPath(newer): "i", CacheDir + "/index/" + newer + ".json": index(newer, false),
		"boot/vmlinuz-6.13.0-no-initramfs": "k",
	})
	kernels, err := Kernels(root)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := kernels[0].Release, "6.13.0-no-initramfs"; got != want {
		t.Errorf("newest kernel = %q, want %q", got, want)
	}
	if got, want := DefaultKernel(kernels, false), old; got != want {
		t.Errorf("default (newest with driver) = %q, want %q", got, want)
	}
	if got, want := DefaultKernel(kernels, true), newer; got != want {
		t.Errorf("default (newest) = %q, want %q", got, want)
	}
	// A module tree that is a link (an unpacked kernel elsewhere) counts too.
	if err := os.MkdirAll(filepath.Join(root, "lib/modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(t.TempDir(), filepath.Join(root, "lib/modules/6.14.0-linked")); err != nil {
		t.Fatal(err)
	}
	if kernels, _ = Kernels(root); !slices.ContainsFunc(kernels, func(k Kernel) bool { return k.Release == "6.14.0-linked" }) {
		t.Errorf("kernels %+v lack the linked module tree 6.14.0-linked", kernels)
	}
}

func TestGrubEntries(t *testing.T) {
	old, newer := "6.1.0-56-cloud-amd64", "6.12.117+deb12-cloud-amd64"
	root := fakeRoot(t, map[string]string{
		"boot/vmlinuz-" + old: "k", "boot/initrd.img-" + old: "i", InitramfsPath(old): "i", CacheDir + "/index/" + old + ".json": index(old, true),
		"boot/vmlinuz-" + newer: "k", InitramfsPath(newer): "i",
	})
	env := GrubEnv{Prepare: "\tinsmod part_gpt\n\tsearch --no-floppy --fs-uuid --set=root 1234\n", BootPath: "/boot", DeviceUUID: "1234",
		Cmdline: "console=ttyS0", CmdlineDefault: "quiet", Distributor: "Debian"}
	var b bytes.Buffer
	if err := GrubEntries(&b, root, env); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	titles := []string{}
	for _, l := range strings.Split(got, "\n") {
		if strings.HasPrefix(l, "menuentry ") {
			titles = append(titles, l[:strings.Index(l, "' ")+1])
		}
	}
	want := []string{
		"menuentry 'Debian GNU/Linux, with Linux " + old + " (kpreload)'",
		"menuentry 'Debian GNU/Linux, with Linux " + newer + " (kpreload)'",
		"menuentry 'Debian GNU/Linux, with Linux " + old + " (distribution initramfs)'",
	}
	if strings.Join(titles, "\n") != strings.Join(want, "\n") {
		t.Errorf("entries =\n%s\nwant\n%s", strings.Join(titles, "\n"), strings.Join(want, "\n"))
	}
	for _, line := range []string{
		"\tlinux\t/boot/vmlinuz-" + old + " root=UUID=1234 ro console=ttyS0 quiet\n",
		"\tinitrd\t/boot/kpreload/initrd.img-" + old + "\n",
		"\tinitrd\t/boot/initrd.img-" + old + "\n",
		"\tsearch --no-floppy --fs-uuid --set=root 1234\n",
		"$menuentry_id_option 'kpreload-" + old + "'",
	} {
		if !strings.Contains(got, line) {
			t.Errorf("entries lack %q:\n%s", line, got)
		}
	}
	// No kpreload initramfs anywhere: nothing at all (10_linux's entries stand).
	b.Reset()
	if err := GrubEntries(&b, fakeRoot(t, map[string]string{"boot/vmlinuz-" + old: "k"}), env); err != nil || b.Len() != 0 {
		t.Errorf("entries without a kpreload initramfs = %q (err %v), want none", b.String(), err)
	}
}

func TestCheckGrubConfig(t *testing.T) {
	k := testKernel
	header := "if [ \"${next_entry}\" ] ; then\n   set default=\"${next_entry}\"\nelse\n   set default=\"0\"\nfi\n"
	ours := "menuentry 'Debian GNU/Linux, with Linux " + k + " (kpreload)' --class debian $menuentry_id_option 'kpreload-" + k + "' {\n}\n"
	theirs := "menuentry 'Debian GNU/Linux' --class debian $menuentry_id_option 'gnulinux-simple-1234' {\n}\n"
	for _, c := range []struct {
		name, cfg, want string
	}{
		{"ours first, default 0", header + ours + theirs, ""},
		{"theirs first", header + theirs + ours, "first menu entry is not kpreload's"},
		{"default saved", strings.ReplaceAll(header, `"0"`, `"${saved_entry}"`) + ours, "set GRUB_DEFAULT=0"},
		{"default names ours", strings.ReplaceAll(header, `"0"`, `"kpreload-`+k+`"`) + ours, ""},
		{"default names the way back", strings.ReplaceAll(header, `"0"`, `"kpreload-distribution-`+k+`"`) + ours, "set GRUB_DEFAULT=0"},
		{"no entries", header, "no menu entry"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := fakeRoot(t, map[string]string{GrubConfig: c.cfg})
			err := CheckGrubConfig(root, k)
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("CheckGrubConfig = %v, want %q", err, c.want)
			}
		})
	}
}

func TestReadSettings(t *testing.T) {
	for _, c := range []struct {
		text    string
		newest  bool
		wantErr bool
	}{
		{"", false, false},
		{"default: newest\n", true, false},
		{"default: newest-with-driver\n", false, false},
		{"default: oldest\n", false, true},
		{"default: [\n", false, true},
	} {
		root := fakeRoot(t, map[string]string{SettingsFile: c.text})
		st, err := ReadSettings(root)
		if (err != nil) != c.wantErr || err == nil && st.NewestFirst() != c.newest {
			t.Errorf("ReadSettings(%q) = %+v, %v; want newest %v, error %v", c.text, st, err, c.newest, c.wantErr)
		}
	}
}

var (
	initOnce sync.Once
	initBin  string
)

// testInit builds the static /init once.
func testInit(t *testing.T) string {
	t.Helper()
	initOnce.Do(func() {
		initBin = testenv.GoBuildStatic(t, sharedDir(t), "kpreload-init", "./cmd/kpreload-init")
	})
	return initBin
}

// TestSystemdBootHooks runs the kernel hooks' Go side on a root laid out like
// a kpreload image (systemd-boot on the ESP) with the real 6.1 kernel's
// modules and the real /init.
func TestSystemdBootHooks(t *testing.T) {
	ktree := testenv.KernelTree(t, testKernel)
	vmlinuz, err := os.ReadFile(filepath.Join(ktree, "boot", "vmlinuz-"+testKernel))
	if err != nil {
		t.Fatal(err)
	}
	init, err := os.ReadFile(testInit(t))
	if err != nil {
		t.Fatal(err)
	}
	older := "6.1.0-55-cloud-amd64"
	cmdline := "root=UUID=0b0e0f0a-1111-4222-8333-444444444444 rw console=ttyS0"
	root := fakeRoot(t, map[string]string{
		"boot/vmlinuz-" + testKernel: string(vmlinuz), Init: string(init), Cmdline: cmdline + "\n",
		"boot/vmlinuz-" + older: "old kernel", InitramfsPath(older): "old initramfs",
		"boot/efi/loader/loader.conf":                         "default kpreload-" + older + ".conf\ntimeout 0\n",
		"boot/efi/loader/entries/kpreload-" + older + ".conf": "title old\n",
		CacheDir + "/index/":                                  "",
		"lib/modules/":                                        "",
		BootOKUnit:                                            "",
	})
	if err := os.Symlink(filepath.Join(ktree, "lib/modules", testKernel), filepath.Join(root, "lib/modules", testKernel)); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	// The module tree is a link out of the root, which the root's own paths
	// never follow: it is given as a host path, as the image builder does.
	o := Options{Root: root, RootFS: testRootFS(), Log: &log, ModulesDir: func(k string) string { return filepath.Join(root, "lib/modules", k) }}
	ctx := context.Background()

	// No cell for either kernel: both boot, the newest is the default, and the
	// result says the cache has no driver for them.
	res, err := KernelAdded(ctx, o, testKernel)
	if err != nil {
		t.Fatalf("postinst: %v\n%s", err, log.String())
	}
	if res.Bootloader != SystemdBoot || res.Default != testKernel || !strings.Contains(strings.Join(res.Warnings, "\n"), "no driver cell for kernel "+testKernel) {
		t.Errorf("postinst result = %+v, want systemd-boot, default %s and a warning that it has no driver cell", res, testKernel)
	}
	esp := filepath.Join(root, ESPMount)
	read := func(p string) string { b, _ := os.ReadFile(filepath.Join(esp, p)); return string(b) }
	// Two bootable kernels: each is the other's fallback, so the default's
	// boots are counted (Automatic Boot Assessment) and /init may fall back.
	counted := "loader/entries/" + CountedEntryName(testKernel)
	if got, want := read(counted), LoaderEntry(testKernel, cmdline+" "+FallbackFlag); got != want {
		t.Errorf("loader entry =\n%s\nwant\n%s", got, want)
	}
	if _, err := os.Stat(filepath.Join(esp, EntryPath(testKernel))); err == nil {
		t.Errorf("%s is there beside the counted entry", EntryPath(testKernel))
	}
	initrd, _ := os.ReadFile(filepath.Join(root, InitramfsPath(testKernel)))
	if got := read(ESPInitrdPath(testKernel)); got != string(initrd) || len(initrd) < 1<<20 {
		t.Errorf("initramfs on the ESP: %d bytes, in /boot/kpreload %d bytes: want the same, over 1 MiB", len(got), len(initrd))
	}
	if read(ESPKernelPath(testKernel)) != string(vmlinuz) {
		t.Errorf("kernel on the ESP differs from /boot/vmlinuz-%s", testKernel)
	}
	if got, want := read(ESPLoaderConf), "default kpreload-"+testKernel+"[.+][c1-9]*\ntimeout 0\n"; got != want {
		t.Errorf("loader.conf = %q, want %q", got, want)
	}

	// The older kernel has the driver: it becomes the default, the newer stays bootable.
	if err := os.WriteFile(filepath.Join(root, CacheDir, "index", older+".json"), []byte(index(older, true)), 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err = KernelAdded(ctx, o, testKernel); err != nil || res.Default != older {
		t.Errorf("postinst with cells for %s only: default %v (err %v), want %s", older, res, err, older)
	}
	if got, want := read(ESPLoaderConf), "default kpreload-"+older+"[.+][c1-9]*\ntimeout 0\n"; got != want {
		t.Errorf("loader.conf = %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(esp, EntryPath(older))); err == nil {
		t.Errorf("the uncounted %s is still there beside the counted one", EntryPath(older))
	}

	// A failing initramfs build fails the hook and changes nothing.
	if _, err := KernelAdded(ctx, o, "9.9.9-nope-amd64"); err == nil || !strings.Contains(err.Error(), "9.9.9-nope-amd64") {
		t.Errorf("postinst for a kernel without modules: %v, want an error naming it", err)
	}
	if _, err := KernelAdded(ctx, o, "../../etc"); err == nil {
		t.Error("postinst for a release with a path in it succeeded")
	}

	// Removing the default kernel points the default at the other and drops its files.
	if res, err = KernelRemoved(ctx, o, older); err != nil || res.Default != testKernel {
		t.Fatalf("postrm: %+v %v\n%s", res, err, log.String())
	}
	for _, p := range []string{filepath.Join(esp, EntryPath(older)), filepath.Join(esp, "loader/entries", CountedEntryName(older)), filepath.Join(esp, "kpreload", older), filepath.Join(root, InitramfsPath(older))} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is still there after postrm", p)
		}
	}
	// One kernel left and no other entry: nothing to fall back to, so its
	// boots are not counted and the entry carries no fallback flag.
	if got, want := read(ESPLoaderConf), "default "+EntryName(testKernel)+"\ntimeout 0\n"; got != want {
		t.Errorf("loader.conf after postrm = %q, want %q", got, want)
	}
	if got, want := read(EntryPath(testKernel)), LoaderEntry(testKernel, cmdline); got != want {
		t.Errorf("loader entry after postrm =\n%s\nwant\n%s", got, want)
	}
	if _, err := os.Stat(filepath.Join(esp, counted)); err == nil || read(ESPKernelPath(testKernel)) != string(vmlinuz) {
		t.Errorf("after postrm the counted entry is still there (%v), or the kernel's files went with it", err)
	}
	if entries, _ := filepath.Glob(filepath.Join(esp, "loader/entries/.*")); len(entries) > 0 {
		t.Errorf("temporary files left on the ESP: %v", entries)
	}
}

// TestInstallNoBootloader: a root with no boot loader is refused before
// anything is written into it.
func TestInstallNoBootloader(t *testing.T) {
	root := fakeRoot(t, map[string]string{"boot/vmlinuz-" + testKernel: "k", "boot/efi/EFI/debian/grubx64.efi": ""})
	_, err := Install(context.Background(), Options{Root: root, RootFS: testRootFS(), Log: io.Discard})
	var nb *NoBootloaderError
	if !errors.As(err, &nb) {
		t.Fatalf("Install = %v, want a NoBootloaderError", err)
	}
	if _, err := os.Stat(filepath.Join(root, PostinstHook)); err == nil {
		t.Error("the kernel hook was written into a root kpreload cannot boot")
	}
}

// TestHookScriptsParse checks the hooks and GRUB's script with sh -n (and
// shellcheck when installed).
func TestHookScriptsParse(t *testing.T) {
	for name, script := range map[string]string{"postinst": postinstText, "postrm": postrmText, "grub": GrubScriptText} {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("sh", "-n", p).CombinedOutput(); err != nil {
			t.Errorf("%s: sh -n: %v\n%s", name, err, out)
		}
		if sc, err := exec.LookPath("shellcheck"); err == nil {
			if out, err := exec.Command(sc, "-s", "sh", "-e", "SC1091,SC2154,SC2086", p).CombinedOutput(); err != nil {
				t.Errorf("%s: shellcheck: %v\n%s", name, err, out)
			}
		}
	}
}

// TestLastKernelRemoved: removing the last kernel that boots with kpreload is
// no error for the kernel package's postrm (dpkg would be left half-done):
// kpreload's entries go, a warning says so, the distribution's stay.
func TestLastKernelRemoved(t *testing.T) {
	const k = "6.1.0-56-cloud-amd64"
	for _, bl := range []Bootloader{SystemdBoot, GRUB} {
		t.Run(string(bl), func(t *testing.T) {
			files := map[string]string{
				InitramfsPath(k):                        "initramfs",
				"boot/efi/loader/loader.conf":           "default " + EntryName(k) + "\ntimeout 0\n",
				"boot/efi/" + EntryPath(k):              "title kpreload\n",
				"boot/efi/loader/entries/debian-k.conf": "title the distribution's\n",
				CacheDir + "/index/":                    "",
				"lib/modules/":                          "",
			}
			root := fakeRoot(t, files)
			var log bytes.Buffer
			grubRuns := 0
			o := Options{Root: root, RootFS: testRootFS(), Bootloader: bl, Log: &log,
				UpdateGrub: func(context.Context, string, io.Writer) error { grubRuns++; return nil }}
			res, err := KernelRemoved(context.Background(), o, k)
			if err != nil {
				t.Fatalf("postrm of the last kernel: %v\n%s", err, log.String())
			}
			if res.Default != "" || !strings.Contains(strings.Join(res.Warnings, "\n"), "no kernel in "+root+" boots with kpreload any more") {
				t.Errorf("result %+v, want no default and the warning", res)
			}
			if _, err := os.Stat(filepath.Join(root, InitramfsPath(k))); !os.IsNotExist(err) {
				t.Errorf("the kpreload initramfs is still there: %v", err)
			}
			switch bl {
			case SystemdBoot:
				if _, err := os.Stat(filepath.Join(root, "boot/efi", EntryPath(k))); !os.IsNotExist(err) {
					t.Errorf("kpreload's entry is still there: %v", err)
				}
				if _, err := os.Stat(filepath.Join(root, "boot/efi/loader/entries/debian-k.conf")); err != nil {
					t.Errorf("the distribution's entry is gone: %v", err)
				}
			case GRUB:
				if grubRuns != 1 {
					t.Errorf("update-grub ran %d times, want once (09_kpreload then lists nothing)", grubRuns)
				}
			}
		})
	}
}
