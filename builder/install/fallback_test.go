package install

import (
	"bytes"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestGrubFallbackEntries: each kpreload entry saves its fallback as GRUB's
// one-shot next_entry before linux, and passes the fallback flag only once
// save_env stored it: the distribution's initramfs entry where there is one,
// else kpreload's entry of the next kernel, else none (no next_entry, no
// flag); the distribution's entry itself never sets one.
func TestGrubFallbackEntries(t *testing.T) {
	def, other := "6.1.0-56-cloud-amd64", "6.12.117+deb12-cloud-amd64"
	tests := []struct {
		name  string
		files map[string]string
		// want maps each entry id, in order, to its fallback ("" none).
		want [][2]string
	}{{
		name: "the distribution's initramfs: every kpreload entry falls back to it",
		files: map[string]string{
			"boot/vmlinuz-" + def: "k", "boot/initrd.img-" + def: "i", InitramfsPath(def): "i", CacheDir + "/index/" + def + ".json": index(def, true),
			"boot/vmlinuz-" + other: "k", InitramfsPath(other): "i", BootOKUnit: "",
		},
		want: [][2]string{{GrubEntryID(def), GrubDistributionEntryID(def)}, {GrubEntryID(other), GrubDistributionEntryID(def)}, {GrubDistributionEntryID(def), ""}},
	}, {
		name: "no kpreload-boot-ok.service to take next_entry back: no fallback at all",
		files: map[string]string{
			"boot/vmlinuz-" + def: "k", "boot/initrd.img-" + def: "i", InitramfsPath(def): "i", CacheDir + "/index/" + def + ".json": index(def, true),
			"boot/vmlinuz-" + other: "k", InitramfsPath(other): "i",
		},
		want: [][2]string{{GrubEntryID(def), ""}, {GrubEntryID(other), ""}, {GrubDistributionEntryID(def), ""}},
	}, {
		name: "no distribution initramfs: the default falls back to the next kernel, the last to none",
		files: map[string]string{
			"boot/vmlinuz-" + def: "k", InitramfsPath(def): "i", CacheDir + "/index/" + def + ".json": index(def, true),
			"boot/vmlinuz-" + other: "k", InitramfsPath(other): "i", BootOKUnit: "",
		},
		want: [][2]string{{GrubEntryID(def), GrubEntryID(other)}, {GrubEntryID(other), ""}},
	}, {
		name:  "one kernel, no distribution initramfs: no fallback",
		files: map[string]string{"boot/vmlinuz-" + def: "k", InitramfsPath(def): "i", BootOKUnit: ""},
		want:  [][2]string{{GrubEntryID(def), ""}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := GrubEntries(&b, fakeRoot(t, tt.files), GrubEnv{BootPath: "/boot", DeviceUUID: "1234"}); err != nil {
				t.Fatal(err)
			}
			var got [][2]string
			for _, block := range strings.Split(b.String(), "\nmenuentry ")[1:] {
				id := strings.Split(block[strings.Index(block, "$menuentry_id_option '")+len("$menuentry_id_option '"):], "'")[0]
				fallback := ""
				if i := strings.Index(block, "\tset next_entry='"); i >= 0 {
					fallback = strings.Split(block[i+len("\tset next_entry='"):], "'")[0]
					// The save, then the flag, before linux; the flag on linux.
					for _, want := range []string{
						"\tset kpreload_fallback=\n\tset next_entry='" + fallback + "'\n\tif save_env next_entry; then set kpreload_fallback=" + FallbackFlag + "; fi\n\techo\t",
						" root=UUID=1234 ro ${kpreload_fallback}\n",
					} {
						if !strings.Contains(block, want) {
							t.Errorf("entry %s lacks %q:\n%s", id, want, block)
						}
					}
				} else if strings.Contains(block, "kpreload_fallback") || strings.Contains(block, "save_env") {
					t.Errorf("entry %s without a fallback mentions one:\n%s", id, block)
				}
				got = append(got, [2]string{id, fallback})
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("entries and fallbacks %q, want %q\n%s", got, tt.want, b.String())
			}
		})
	}
}

// TestEntryNames: kpreload's loader entry names with and without systemd's
// boot counter, read back as systemd-boot reads them.
func TestEntryNames(t *testing.T) {
	k := "6.12.117+deb12-cloud-amd64"
	tests := []struct {
		name, kernel string
		tries        int
		ok           bool
	}{
		{EntryName(k), k, -1, true},
		{CountedEntryName(k), k, BootTries, true},
		{"kpreload-" + k + "+1-1.conf", k, 1, true},
		{"kpreload-" + k + "+0-2.conf", k, 0, true},
		{"kpreload-6.1.0-56-cloud-amd64+0-2.conf", "6.1.0-56-cloud-amd64", 0, true},
		{"kpreload-6.1.0-56-cloud-amd64.conf", "6.1.0-56-cloud-amd64", -1, true},
		{"debian-" + k + ".conf", "", 0, false},
		{"kpreload-.conf", "", 0, false},
		{"kpreload-+2.conf", "", 0, false},
		{"kpreload-" + k + ".conf.tmp", "", 0, false},
	}
	for _, tt := range tests {
		kernel, tries, ok := ParseEntryName(tt.name)
		if kernel != tt.kernel || tries != tt.tries || ok != tt.ok {
			t.Errorf("ParseEntryName(%q) = %q, %d, %v; want %q, %d, %v", tt.name, kernel, tries, ok, tt.kernel, tt.tries, tt.ok)
		}
	}
}

// TestLoaderDefault checks loader.conf's default pattern against entry names
// with Go's path.Match, whose "*", "?", "[...]" and "\" are systemd-boot's
// efi_fnmatch's (v252 src/boot/efi/efi-string.c) for names without '/':
// a counted default matches its entry with tries left or marked good, and
// neither its bad state nor any other entry (another kernel's, the
// distribution's), so a bad entry makes systemd-boot pick its first sorted
// entry, the fallback.
func TestLoaderDefault(t *testing.T) {
	k, other := "6.1.0-56-cloud-amd64", "6.1.0-56-rt-amd64"
	tests := []struct {
		counted bool
		entry   string
		match   bool
	}{
		{true, CountedEntryName(k), true},
		{true, "kpreload-" + k + "+1-1.conf", true},
		{true, EntryName(k), true},
		{true, "kpreload-" + k + "+0-2.conf", false},
		{true, CountedEntryName(other), false},
		{true, "debian-" + k + ".conf", false},
		{true, "0123456789abcdef0123456789abcdef-" + k + ".conf", false},
		{false, EntryName(k), true},
		{false, CountedEntryName(k), false},
	}
	for _, tt := range tests {
		pattern := LoaderDefault(k, tt.counted)
		got, err := path.Match(pattern, strings.ToLower(tt.entry))
		if err != nil || got != tt.match {
			t.Errorf("default %q matches %q: %v (%v), want %v", pattern, tt.entry, got, err, tt.match)
		}
	}
	if got, want := LoaderDefault("6.1[x]*?\\", true), `kpreload-6.1\[x\]\*\?\\[.+][c1-9]*`; got != want {
		t.Errorf("LoaderDefault escapes the release as %q, want %q", got, want)
	}
}

// TestSystemdBootCounting: with a fallback entry on the ESP and something in
// the root to mark a boot good (kpreload-boot-ok.service or
// systemd-bless-boot), kpreload's entries are counted and carry the
// fallback flag; an entry systemd-boot left bad ("+0-2") is written afresh
// with its tries, the kernel's files stay; without a fallback (one kernel,
// no other good entry: a bad distribution entry does not count) or without
// a blesser (good entries would go bad) the entry is not counted.
func TestSystemdBootCounting(t *testing.T) {
	k := testKernel
	tests := []struct {
		name    string
		entries map[string]string
		blesser string // the root's file that marks entries good
		want    string // the entry file kpreload's sync leaves
		flag    bool
	}{
		{"a distribution entry", map[string]string{"debian-" + k + ".conf": "title d\n", "kpreload-" + k + "+0-2.conf": "title bad\n"}, BootOKUnit, CountedEntryName(k), true},
		{"a distribution entry, systemd-bless-boot", map[string]string{"debian-" + k + ".conf": "title d\n"}, "lib/systemd/systemd-bless-boot", CountedEntryName(k), true},
		{"a distribution entry, nothing to mark an entry good", map[string]string{"debian-" + k + ".conf": "title d\n", CountedEntryName(k): "title old\n"}, "", EntryName(k), false},
		{"a bad distribution entry only", map[string]string{"debian-" + k + "+0-3.conf": "title d\n", CountedEntryName(k): "title old\n"}, BootOKUnit, EntryName(k), false},
		{"a bad distribution entry with no count of boots done", map[string]string{"debian-" + k + "+0.conf": "title d\n"}, BootOKUnit, EntryName(k), false},
		{"a distribution entry with tries left", map[string]string{"debian-" + k + "+3.conf": "title d\n"}, BootOKUnit, CountedEntryName(k), true},
		{"nothing else", map[string]string{"kpreload-" + k + "+1-1.conf": "title old\n"}, BootOKUnit, EntryName(k), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := map[string]string{
				"boot/vmlinuz-" + k: "kernel", InitramfsPath(k): "initramfs",
				"boot/efi/loader/loader.conf": "timeout 3\n",
			}
			for n, text := range tt.entries {
				files["boot/efi/loader/entries/"+n] = text
			}
			if tt.blesser != "" {
				files[tt.blesser] = ""
			}
			root := fakeRoot(t, files)
			kernels, err := Kernels(root)
			if err != nil {
				t.Fatal(err)
			}
			if err := syncSystemdBoot(root, espOf(root, ""), kernels, k, "root=UUID=x rw"); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(root, "boot/efi/loader/entries")
			ents, _ := os.ReadDir(dir)
			var kp []string
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), "kpreload-") {
					kp = append(kp, e.Name())
				}
			}
			if !slices.Equal(kp, []string{tt.want}) {
				t.Errorf("kpreload's entries %q, want %q", kp, tt.want)
			}
			cmdline := "root=UUID=x rw"
			if tt.flag {
				cmdline += " " + FallbackFlag
			}
			if b, _ := os.ReadFile(filepath.Join(dir, tt.want)); string(b) != LoaderEntry(k, cmdline) {
				t.Errorf("entry %s =\n%s\nwant\n%s", tt.want, b, LoaderEntry(k, cmdline))
			}
			conf, _ := os.ReadFile(filepath.Join(root, "boot/efi", ESPLoaderConf))
			if want := "timeout 3\ndefault " + LoaderDefault(k, tt.flag) + "\n"; string(conf) != want {
				t.Errorf("loader.conf %q, want %q", conf, want)
			}
			if b, _ := os.ReadFile(filepath.Join(root, "boot/efi", ESPInitrdPath(k))); string(b) != "initramfs" {
				t.Errorf("the kernel's initramfs on the ESP: %q", b)
			}
		})
	}
}
