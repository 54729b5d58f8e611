package install

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/internal/inroot/inroottest"
)

// TestHooksBadSettings: a boot.yaml that does not parse, holds a bad value
// or keys kpreload does not know never fails the kernel hooks or
// grub-entries (dpkg and grub-mkconfig must finish): a warning names the
// file, the defaults apply. kpreload install, run by hand, refuses it.
func TestHooksBadSettings(t *testing.T) {
	for _, c := range []struct{ name, text, warn string }{
		{"does not parse", "default: [\n", "boot.yaml"},
		{"bad value", "default: oldest\n", `default "oldest"`},
		{"unknown key", "defualt: newest\n", `"defualt"`},
		{"not a mapping", "- newest\n", "want a mapping"},
	} {
		for _, bl := range []Bootloader{GRUB, SystemdBoot} {
			t.Run(c.name+"/"+string(bl), func(t *testing.T) {
				root, _ := linkRoot(t)
				var log bytes.Buffer
				o := Options{Root: root, RootFS: testRootFS(), Bootloader: bl, Log: &log, UpdateGrub: chrootUpdateGrub}
				ctx := context.Background()
				if _, err := Install(ctx, o); err != nil {
					t.Fatalf("install with a good boot.yaml: %v", err)
				}
				if err := os.WriteFile(filepath.Join(root, SettingsFile), []byte(c.text), 0o644); err != nil {
					t.Fatal(err)
				}
				settings := filepath.Join(root, SettingsFile)
				if _, err := Install(ctx, o); err == nil || !strings.Contains(err.Error(), settings) || !strings.Contains(err.Error(), c.warn) {
					t.Errorf("install with boot.yaml %q: %v, want an error naming %s and saying %q", c.text, err, settings, c.warn)
				}
				log.Reset()
				res, err := KernelAdded(ctx, o, testKernel)
				if err != nil {
					t.Fatalf("postinst with boot.yaml %q: %v, want success", c.text, err)
				}
				if w := strings.Join(res.Warnings, "\n"); !strings.Contains(w, settings) || !strings.Contains(w, c.warn) || !strings.Contains(log.String(), "WARNING") {
					t.Errorf("postinst warnings %q (log %q): want one naming %s and saying %q", w, log.String(), settings, c.warn)
				}
				if res.Default != testKernel {
					t.Errorf("postinst default = %q, want %s (the default policy)", res.Default, testKernel)
				}
				var out, warn bytes.Buffer
				if err := GrubEntries(&out, root, GrubEnv{DeviceUUID: "1234", Log: &warn}); err != nil || !strings.Contains(out.String(), "menuentry '") {
					t.Errorf("grub-entries with boot.yaml %q: %v\n%s\nwant its entries", c.text, err, out.String())
				}
				if !strings.Contains(warn.String(), settings) {
					t.Errorf("grub-entries warned %q, want a warning naming %s", warn.String(), settings)
				}
				if _, err := KernelRemoved(ctx, o, testKernel); err != nil {
					t.Errorf("postrm with boot.yaml %q: %v, want success", c.text, err)
				}
			})
		}
	}
}

// TestReadSettingsUnknownKeys: unknown keys are named, never silently taken;
// the hooks keep the keys they know.
func TestReadSettingsUnknownKeys(t *testing.T) {
	root := fakeRoot(t, map[string]string{SettingsFile: "default: newest\ntypo: 1\n"})
	if _, err := ReadSettings(root); err == nil || !strings.Contains(err.Error(), `"typo"`) {
		t.Errorf("ReadSettings = %v, want an error naming the key typo", err)
	}
	st, warnings := ReadSettingsOrDefaults(root)
	if !st.NewestFirst() || len(warnings) != 1 || !strings.Contains(warnings[0], `"typo"`) {
		t.Errorf("ReadSettingsOrDefaults = %+v, %q; want default newest and a warning naming typo", st, warnings)
	}
	// Many unknown keys: a bounded warning.
	var b strings.Builder
	for i := range 10000 {
		b.WriteString("k" + strings.Repeat("x", i%50) + "_" + strconv.Itoa(i) + ": 1\n")
	}
	root = fakeRoot(t, map[string]string{SettingsFile: b.String()})
	if _, warnings := ReadSettingsOrDefaults(root); len(warnings) != 1 || len(warnings[0]) > 1000 {
		t.Errorf("10000 unknown keys: %d warnings, the first %d bytes long; want one, short", len(warnings), len(warnings[0]))
	}
}

// grubWords splits a line of GRUB script into words as GRUB's lexer does
// for the quoting kpreload uses: '...' quotes everything but ', \ escapes
// the next character outside quotes, blanks separate words.
func grubWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	in, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted:
			if c == '\'' {
				quoted = false
			} else {
				cur.WriteByte(c)
			}
		case c == '\'':
			quoted, in = true, true
		case c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
			in = true
		case c == ' ' || c == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if quoted {
		t.Fatalf("unterminated quote in %q", line)
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// TestGrubTitleQuoting: a GRUB_DISTRIBUTOR holding ' stays inside the title
// (quoted as grub_quote does) and adds no menu entry.
func TestGrubTitleQuoting(t *testing.T) {
	root, _ := linkRoot(t)
	if err := os.WriteFile(filepath.Join(root, InitramfsPath(testKernel)), []byte("i"), 0o644); err != nil {
		t.Fatal(err)
	}
	evil := "Evil' { }\nmenuentry 'pwned' { linux /evil }\n#"
	var b bytes.Buffer
	if err := GrubEntries(&b, root, GrubEnv{DeviceUUID: "1234", Distributor: evil}); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	title := "menuentry 'Evil'\\'' { } menuentry '\\''pwned'\\'' { linux /evil } # GNU/Linux, with Linux " + testKernel + " (kpreload)' --class debian"
	if !strings.Contains(got, title) {
		t.Errorf("entries:\n%s\nwant the title quoted as grub_quote does:\n%s", got, title)
	}
	// The title is one line (its newlines became spaces), the first word
	// after menuentry is the whole title, and no line starts another entry.
	start := strings.Index(got, "menuentry ")
	end := strings.Index(got, " --class debian")
	words := grubWords(t, got[start:end])
	if want := []string{"menuentry", strings.Join(strings.Fields(evil), " ") + " GNU/Linux, with Linux " + testKernel + " (kpreload)"}; len(words) != 2 || words[1] != want[1] {
		t.Errorf("menuentry words = %q, want %q", words, want)
	}
	if n := strings.Count(got, "\nmenuentry 'pwned'"); n != 0 {
		t.Errorf("the distributor added a menu entry:\n%s", got)
	}
}

// TestMultilineCmdline: an etc/kpreload/cmdline of more than one line would
// put keys of its own (initrd, linux) into a loader entry: install refuses
// it naming the file; the kernel hook warns and keeps the command line of
// kpreload's entries already on the ESP.
func TestMultilineCmdline(t *testing.T) {
	root, _ := linkRoot(t)
	o := Options{Root: root, RootFS: testRootFS(), Bootloader: SystemdBoot, Log: io.Discard}
	ctx := context.Background()
	if _, err := Install(ctx, o); err != nil {
		t.Fatal(err)
	}
	bad := "root=UUID=x rw\ninitrd /evil.img\n"
	if err := os.WriteFile(filepath.Join(root, Cmdline), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, Cmdline)
	if _, err := Install(ctx, o); err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "more than one line") {
		t.Errorf("install with a two-line cmdline: %v, want an error naming %s", err, file)
	}
	res, err := KernelAdded(ctx, o, testKernel)
	if err != nil {
		t.Fatalf("postinst with a two-line cmdline: %v, want success", err)
	}
	if w := strings.Join(res.Warnings, "\n"); !strings.Contains(w, file) {
		t.Errorf("postinst warnings %q, want one naming %s", w, file)
	}
	// The root's ESP has another entry (debian.conf): kpreload's is counted
	// and carries the fallback flag, once, though the earlier entry had it too.
	entry, err := os.ReadFile(filepath.Join(root, ESPMount, ESPEntriesDir, CountedEntryName(testKernel)))
	if err != nil || string(entry) != LoaderEntry(testKernel, "root=UUID=x rw "+FallbackFlag) || strings.Contains(string(entry), "evil") {
		t.Errorf("entry after postinst = %q (%v), want the earlier command line", entry, err)
	}
	if _, err := Install(ctx, Options{Root: root, RootFS: testRootFS(), Bootloader: SystemdBoot, Cmdline: "a\nlinux /evil", Log: io.Discard}); err == nil || !strings.Contains(err.Error(), "--cmdline") {
		t.Errorf("install --cmdline of two lines: %v, want an error naming --cmdline", err)
	}
}

// TestHookConfigFIFO: boot.yaml, the cmdline file and remote.yaml made
// FIFOs (or links out of the root) never hang the kernel hook: each is
// refused as not a regular file, with a warning naming it.
func TestHookConfigFIFO(t *testing.T) {
	for _, name := range []string{SettingsFile, Cmdline, RemoteFile} {
		t.Run(filepath.Base(name), func(t *testing.T) {
			root, _ := linkRoot(t)
			o := Options{Root: root, RootFS: testRootFS(), Bootloader: SystemdBoot, Log: io.Discard}
			ctx := context.Background()
			if _, err := Install(ctx, o); err != nil {
				t.Fatal(err)
			}
			// The hook pulls (and so reads remote.yaml) only for a kernel
			// without cells.
			if err := os.Remove(filepath.Join(root, CacheDir, "index", testKernel+".json")); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(root, name)
			os.Remove(p)
			if err := unix.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			var res *Result
			go func() {
				var err error
				res, err = KernelAdded(ctx, o, testKernel)
				done <- err
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("postinst with %s a FIFO: %v", name, err)
				}
				if w := strings.Join(res.Warnings, "\n"); !strings.Contains(w, p) || !strings.Contains(w, "not a regular file") {
					t.Errorf("warnings %q, want one naming %s as not a regular file", w, p)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("postinst with %s a FIFO hangs", name)
			}
		})
	}
}

// TestStageRemoteConfigRefusesSpecialFiles: the registry configuration
// install --remote-config stages into a root that is a FIFO, a device, a
// directory or larger than inroot.MaxText is refused at once, naming it.
func TestStageRemoteConfigRefusesSpecialFiles(t *testing.T) {
	for _, kind := range inroottest.Specials(inroot.MaxText) {
		t.Run(kind.Name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "remote.yaml")
			kind.Make(t, p)
			root := t.TempDir()
			inroottest.RefusesAtOnce(t, "StageRemoteConfig", p, kind.Want, func() error { return StageRemoteConfig(p, root) })
		})
	}
}
