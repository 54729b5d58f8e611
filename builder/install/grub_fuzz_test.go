package install

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// grubEntriesFuzz is the GrubEntries call the fuzz targets make (a local
// wrapper, so that a change of its signature is one line here).
func grubEntriesFuzz(root string, env GrubEnv) (string, error) {
	var b bytes.Buffer
	err := GrubEntries(&b, root, env)
	return b.String(), err
}

// checkGrubConfigFuzz is the CheckGrubConfig call the fuzz targets make.
func checkGrubConfigFuzz(root, kernel string) error { return CheckGrubConfig(root, kernel) }

// grubCommands splits GRUB script the way GRUB's own lexer does for what
// grub-mkconfig writes: blanks separate words; an unquoted newline or ';'
// ends a command; '#' at the start of a word comments to the end of the
// line; '…' quotes literally (newlines included); "…" quotes, with \
// escaping \ " $ and newline; \ outside quotes escapes the next character.
// Each command is its words, unquoted. An unterminated quote is an error.
func grubCommands(s string) ([][]string, error) {
	var cmds [][]string
	var cmd []string
	var w strings.Builder
	inWord := false
	endWord := func() {
		if inWord {
			cmd = append(cmd, w.String())
			w.Reset()
			inWord = false
		}
	}
	endCmd := func() {
		endWord()
		if len(cmd) > 0 {
			cmds = append(cmds, cmd)
			cmd = nil
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated ' at byte %d", i)
			}
			w.WriteString(s[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case c == '"':
			inWord = true
			for i++; ; i++ {
				if i >= len(s) {
					return nil, errors.New(`unterminated "`)
				}
				if s[i] == '"' {
					break
				}
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\\\"$\n", s[i+1]) >= 0 {
					i++
					if s[i] == '\n' {
						continue
					}
				}
				w.WriteByte(s[i])
			}
		case c == '\\':
			if i+1 < len(s) {
				i++
				if s[i] != '\n' {
					w.WriteByte(s[i])
					inWord = true
				}
			}
		case c == '#' && !inWord:
			for i < len(s) && s[i] != '\n' {
				i++
			}
			endCmd()
		case c == '\n' || c == ';':
			endCmd()
		case c == ' ' || c == '\t':
			endWord()
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	endCmd()
	return cmds, nil
}

// grubMeta replaces what GRUB script gives a meaning to (quotes, escapes,
// expansions, separators, blocks, redirections, control characters) in s.
// The kernel command line and the root device go into the linux line
// unquoted, as Debian's 10_linux writes them: they are GRUB script by design
// (/etc/default/grub, grub-probe), so the fuzzer keeps them to plain words.
func grubMeta(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\t' && r != '\n' || r == 0x7f || strings.ContainsRune(`'"\$;|&<>{}#`, r) {
			return '_'
		}
		return r
	}, s)
}

// blanks turns control characters into blanks and runs of blanks into one
// space: a title may keep, drop or replace a control character of the
// distributor's name, but nothing else.
func blanks(s string) string {
	return strings.Join(strings.Fields(strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)), " ")
}

// FuzzGrubEntries checks the GRUB menu entries `kernel-hook grub-entries`
// prints into grub.cfg from grub-mkconfig's environment and the root's
// kernels: read back with GRUB's quoting rules, whatever GRUB_DISTRIBUTOR
// and the kernel release hold, the output is exactly the expected entries —
// one menuentry block per kpreload kernel and one for the distribution's
// initramfs, each with insmod, the prepare commands, (kpreload's) the
// one-shot fallback to the distribution's entry, echo, linux, initrd —
// so no input injects a command, a key or an entry; each title holds the
// distributor as given (trimmed) and its kernel; the ids are kpreload's;
// the linux line boots the kernel's image with the given command line; and
// CheckGrubConfig accepts the entries under a default of 0 (what kpreload
// writes, its own check takes).
func FuzzGrubEntries(f *testing.F) {
	for _, s := range []struct {
		distributor, release, cmdline, cmdlineDefault, device, uuid string
		disableUUID                                                 bool
	}{
		{"Debian", "6.12.117+deb12-cloud-amd64", "console=ttyS0", "quiet", "/dev/vda1", "3f1c9a2e-7b1d-4c55-9e0e-0a1b2c3d4e5f", false},
		{"", "6.1.0-57-cloud-amd64", "", "", "/dev/nvme0n1p1", "", false},
		{"Ubuntu", "6.8.0-45-generic", "console=tty1 console=ttyS0,115200n8", "quiet splash", "/dev/sda1", "c0ffee00-1234-5678-9abc-def012345678", true},
		{"  Debian  ", "5.10.0~rc1", "  init_on_alloc=0   nvidia.NVreg_EnableGpuFirmware=0 ", "", "/dev/vda1", "1234", false},
		{"Debian", "6.1.0-56-cloud-amd64", "x\ninitrd /evil", "", "/dev/vda1", "1234", false},
		{"Debian", "../../etc", "", "", "", "", false},
	} {
		f.Add(s.distributor, s.release, s.cmdline, s.cmdlineDefault, s.device, s.uuid, s.disableUUID)
	}
	prepare := "\tinsmod part_gpt\n\tinsmod ext2\n\tsearch --no-floppy --fs-uuid --set=root 3f1c9a2e-7b1d-4c55-9e0e-0a1b2c3d4e5f\n"
	prepCmds, err := grubCommands(prepare)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, distributor, release, cmdline, cmdlineDefault, device, uuid string, disableUUID bool) {
		// Two kernels: testKernel with a driver in the cache and the
		// distribution's initramfs (the default), and the fuzzed release
		// when it is one (Kernels skips any other name in /boot).
		files := map[string]string{
			"boot/vmlinuz-" + testKernel: "k", "boot/initrd.img-" + testKernel: "i", InitramfsPath(testKernel): "i",
			CacheDir + "/index/" + testKernel + ".json": index(testKernel, true),
			BootOKUnit: "",
		}
		kernels := []string{testKernel}
		if release != testKernel && !strings.ContainsAny(release, "/\x00") && release != "" && release != "." && release != ".." && len(release) < 200 {
			files["boot/vmlinuz-"+release] = "k"
			if CheckRelease(release) == nil {
				files[InitramfsPath(release)] = "i"
				kernels = append(kernels, release)
			}
		}
		root := fakeRoot(t, files)
		env := GrubEnv{Prepare: prepare, BootPath: "/boot", Device: grubMeta(device), DeviceUUID: grubMeta(uuid), DisableUUID: disableUUID,
			Cmdline: grubMeta(cmdline), CmdlineDefault: grubMeta(cmdlineDefault), Distributor: distributor}
		out, err := grubEntriesFuzz(root, env)
		if err != nil {
			t.Fatalf("GrubEntries(Distributor %q, release %q) = %v", distributor, release, err)
		}
		cmds, err := grubCommands(out)
		if err != nil {
			t.Fatalf("GrubEntries(Distributor %q, release %q): %v in\n%s", distributor, release, err, out)
		}
		osName := strings.TrimSpace(distributor)
		if osName == "" {
			osName = "Debian"
		}
		type entry struct{ kernel, title, id, initrd, fallback string }
		var want []entry
		// Every kpreload entry falls back to the distribution's initramfs.
		dist := GrubDistributionEntryID(testKernel)
		for _, k := range kernels {
			want = append(want, entry{k, "kpreload", GrubEntryID(k), "/boot/kpreload/initrd.img-" + k, dist})
		}
		want = append(want, entry{testKernel, "distribution initramfs", dist, "/boot/initrd.img-" + testKernel, ""})
		// The default (testKernel, with its driver) comes first; the others follow.
		args := strings.Fields("root=UUID=" + env.DeviceUUID + " ro " + env.Cmdline + " " + env.CmdlineDefault)
		if env.DeviceUUID == "" || env.DisableUUID {
			args = strings.Fields("root=" + env.Device + " ro " + env.Cmdline + " " + env.CmdlineDefault)
		}
		fail := func(format string, a ...any) {
			t.Helper()
			t.Fatalf("GrubEntries(Distributor %q, release %q, cmdline %q): %s; output:\n%s", distributor, release, env.Cmdline, fmt.Sprintf(format, a...), out)
		}
		i := 0
		next := func() []string {
			if i >= len(cmds) {
				fail("ends after %d commands", i)
			}
			i++
			return cmds[i-1]
		}
		for _, e := range want {
			c := next()
			if c[0] != "menuentry" || c[len(c)-1] != "{" || len(c) < 4 {
				fail("command %d is %q, want the menuentry of %s (%s)", i, c, e.kernel, e.title)
			}
			title := c[1]
			wantTitle := osName + " GNU/Linux, with Linux " + e.kernel + " (" + e.title + ")"
			if title != wantTitle && blanks(title) != blanks(wantTitle) {
				fail("title %q, want %q", title, wantTitle)
			}
			if got := c[len(c)-2]; got != e.id || c[len(c)-3] != "$menuentry_id_option" {
				fail("entry %q has id %q, want %q", title, got, e.id)
			}
			if c := next(); strings.Join(c, " ") != "insmod gzio" {
				fail("command %d is %q, want insmod gzio", i, c)
			}
			for _, p := range prepCmds {
				if c := next(); strings.Join(c, " ") != strings.Join(p, " ") {
					fail("command %d is %q, want %q", i, c, p)
				}
			}
			line := args
			if e.fallback != "" {
				// The one-shot fallback, saved before linux; the flag only once saved.
				for _, w := range []string{"set kpreload_fallback=", "set next_entry=" + e.fallback, "if save_env next_entry", "then set kpreload_fallback=" + FallbackFlag, "fi"} {
					if c := next(); strings.Join(c, " ") != w {
						fail("command %d is %q, want %q", i, c, w)
					}
				}
				line = append(slices.Clip(args), "${kpreload_fallback}")
			}
			if c := next(); c[0] != "echo" || len(c) != 2 {
				fail("command %d is %q, want one echo", i, c)
			}
			if c := next(); c[0] != "linux" || len(c) < 2 || c[1] != "/boot/vmlinuz-"+e.kernel || strings.Join(c[2:], " ") != strings.Join(line, " ") {
				fail("command %d is %q, want linux /boot/vmlinuz-%s %s", i, c, e.kernel, strings.Join(line, " "))
			}
			if c := next(); strings.Join(c, " ") != "initrd "+e.initrd {
				fail("command %d is %q, want initrd %s", i, c, e.initrd)
			}
			if c := next(); strings.Join(c, " ") != "}" {
				fail("command %d is %q, want }", i, c)
			}
		}
		if i != len(cmds) {
			fail("%d commands after the entries, first %q", len(cmds)-i, cmds[i])
		}
		cfg := filepath.Join(root, GrubConfig)
		if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cfg, []byte("set default=\"0\"\n"+out), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := checkGrubConfigFuzz(root, testKernel); err != nil {
			fail("CheckGrubConfig of the entries: %v", err)
		}
	})
}

// FuzzCheckGrubConfig checks the reader of a root's grub.cfg (written by
// grub-mkconfig from the root's /etc/grub.d and /etc/default/grub): no
// panic; an error names the file; an accepted grub.cfg has kpreload's id for
// the kernel in its first menu entry line and sets a default; and what
// follows kpreload's first entry under a default of 0 never changes the
// verdict (any later entries, defaults or bytes are accepted).
func FuzzCheckGrubConfig(f *testing.F) {
	k := testKernel
	header := "if [ \"${next_entry}\" ] ; then\n   set default=\"${next_entry}\"\nelse\n   set default=\"0\"\nfi\n"
	ours := "menuentry 'Debian GNU/Linux, with Linux " + k + " (kpreload)' --class debian --class gnu-linux --class gnu --class os $menuentry_id_option 'kpreload-" + k + "' {\n\tinsmod gzio\n\tlinux\t/boot/vmlinuz-" + k + " root=UUID=1234 ro\n\tinitrd\t/boot/kpreload/initrd.img-" + k + "\n}\n"
	theirs := "menuentry 'Debian GNU/Linux' --class debian $menuentry_id_option 'gnulinux-simple-1234' {\n\tlinux\t/boot/vmlinuz-" + k + " root=UUID=1234 ro\n}\n"
	sub := "submenu 'Advanced options for Debian GNU/Linux' $menuentry_id_option 'gnulinux-advanced-1234' {\n" + theirs + "}\n"
	for _, s := range [][2]string{
		{header + ours + theirs, ""},
		{header + theirs + ours, ""},
		{header + sub + ours, "set default=\"0\"\n"},
		{strings.ReplaceAll(header, `"0"`, `"${saved_entry}"`) + ours, theirs},
		{strings.ReplaceAll(header, `"0"`, `"kpreload-`+k+`"`) + ours, sub},
		{strings.ReplaceAll(header, `"0"`, `"kpreload-distribution-`+k+`"`) + ours, "\x00\xff"},
		{header, "menuentry 'x' $menuentry_id_option 'kpreload-distribution-" + k + "' {\n}\n"},
		{"", ""},
		{"menuentry 'kpreload-" + k + "'", "set default=kpreload-"},
	} {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, cfg, tail []byte) {
		root := fakeRoot(t, map[string]string{GrubConfig: string(cfg)})
		p := filepath.Join(root, GrubConfig)
		err := checkGrubConfigFuzz(root, k)
		if err != nil && !strings.Contains(err.Error(), p) {
			t.Fatalf("CheckGrubConfig(%q) = %v: the error does not name %s", cfg, err, p)
		}
		if err == nil {
			first := ""
			for _, l := range strings.Split(string(cfg), "\n") {
				if strings.HasPrefix(l, "menuentry ") || strings.HasPrefix(l, "submenu ") {
					first = l
					break
				}
			}
			if !strings.Contains(first, "'"+GrubEntryID(k)+"'") || !strings.Contains(string(cfg), "set default=") {
				t.Fatalf("CheckGrubConfig(%q) accepted a grub.cfg whose first entry %q is not kpreload's, or that sets no default", cfg, first)
			}
		}
		good := header + ours + "\n" + string(tail)
		if err := os.WriteFile(p, []byte(good), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := checkGrubConfigFuzz(root, k); err != nil {
			t.Fatalf("CheckGrubConfig(kpreload's entry first, then %q) = %v, want nil", tail, err)
		}
	})
}
