package install

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/kpreload/kpreload/internal/inroot"
)

// ESP layout of a systemd-boot root: where Install puts systemd-boot's
// configuration and each kernel's files.
const (
	// ESPBootloader is systemd-boot as the removable-media default loader,
	// which firmware boots with no NVRAM entry.
	ESPBootloader = "EFI/BOOT/BOOTX64.EFI"
	// ESPSystemdBoot is systemd-boot's own path (bootctl's layout).
	ESPSystemdBoot = "EFI/systemd/systemd-bootx64.efi"
	// ESPLoaderConf is systemd-boot's configuration.
	ESPLoaderConf = "loader/loader.conf"
	// ESPEntriesDir holds one loader entry per kernel.
	ESPEntriesDir = "loader/entries"
	// espKernelsDir holds <release>/vmlinuz and <release>/initrd.img.
	espKernelsDir = "kpreload"
)

// EntryName is the loader entry file name of a kernel, such as
// "kpreload-6.1.0-56-cloud-amd64.conf" (an entry whose boots are not
// counted, or one systemd-bless-boot marked good).
func EntryName(kernel string) string { return "kpreload-" + kernel + ".conf" }

// BootTries is how many boots a new kpreload entry gets before systemd-boot
// counts it as bad (Automatic Boot Assessment): two, so that one boot cut
// short (a VM stopped before the system came up) does not lose the entry.
const BootTries = 2

// CountedEntryName is the loader entry file name of a kernel whose boots
// systemd-boot counts, such as "kpreload-6.1.0-56-cloud-amd64+2.conf":
// systemd-boot renames it to "+1-1", "+0-2" at each boot that does not reach
// boot-complete.target, and systemd-bless-boot (or `kpreload kernel-hook
// boot-ok`) back to EntryName once one does.
func CountedEntryName(kernel string) string {
	return fmt.Sprintf("kpreload-%s+%d.conf", kernel, BootTries)
}

// ParseEntryName returns the kernel of a kpreload loader entry file name,
// with or without a boot counter ("+LEFT" or "+LEFT-DONE", as systemd-boot
// parses it: after the last '+', digits only), and the tries left (-1 when
// the boots are not counted).
func ParseEntryName(name string) (kernel string, triesLeft int, ok bool) {
	base, found := strings.CutSuffix(name, ".conf")
	if !found {
		return "", 0, false
	}
	base, found = strings.CutPrefix(base, "kpreload-")
	if !found || base == "" {
		return "", 0, false
	}
	base, triesLeft = splitCounter(base)
	if base == "" {
		return "", 0, false
	}
	return base, triesLeft, true
}

// splitCounter splits a loader entry's name (without ".conf") into the name
// and systemd-boot's tries left: the counter is "+LEFT" or "+LEFT-DONE"
// after the last '+', digits only; -1 when there is none.
func splitCounter(base string) (string, int) {
	i := strings.LastIndexByte(base, '+')
	if i < 0 {
		return base, -1
	}
	left, done, hasDone := strings.Cut(base[i+1:], "-")
	if !allDigits(left) || hasDone && !allDigits(done) {
		return base, -1
	}
	n, err := strconv.Atoi(left)
	if err != nil {
		return base, -1
	}
	return base[:i], n
}

func allDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// LoaderDefault is loader.conf's default for a kernel's kpreload entry. An
// entry whose boots are not counted is named as it is. A counted one is a
// pattern (systemd-boot's own fnmatch: "*", "?", "[...]", "\" escapes,
// against the entry's file name in lower case) that matches the entry
// with tries left or marked good, and not once it is bad ("+0-N"): then no
// entry matches and systemd-boot boots the first entry of its sorted list,
// where bad entries come last — the fallback.
func LoaderDefault(kernel string, counted bool) string {
	if !counted {
		return EntryName(kernel)
	}
	var b strings.Builder
	b.WriteString("kpreload-")
	for _, r := range strings.ToLower(kernel) {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	// "kpreload-K.conf" (marked good) or "kpreload-K+N…" with N from 1.
	b.WriteString("[.+][c1-9]*")
	return b.String()
}

// EntryPath is the loader entry's path on the ESP.
func EntryPath(kernel string) string { return ESPEntriesDir + "/" + EntryName(kernel) }

// ESPKernelPath is where a kernel's image goes on the ESP.
func ESPKernelPath(kernel string) string { return espKernelsDir + "/" + kernel + "/vmlinuz" }

// ESPInitrdPath is where a kernel's kpreload initramfs goes on the ESP.
func ESPInitrdPath(kernel string) string { return espKernelsDir + "/" + kernel + "/initrd.img" }

// LoaderEntry returns the systemd-boot loader entry (Boot Loader Specification
// type #1) of a kernel with the given command line.
func LoaderEntry(kernel, cmdline string) string {
	return fmt.Sprintf("title Debian GNU/Linux %s (kpreload)\nversion %s\nlinux /%s\ninitrd /%s\noptions %s\n",
		kernel, kernel, ESPKernelPath(kernel), ESPInitrdPath(kernel), strings.TrimSpace(cmdline))
}

// LoaderConf returns a new loader.conf booting the given kernel's entry by
// default (def, LoaderDefault) with no menu delay (the menu still appears
// while a key is held).
func LoaderConf(def string) string {
	return fmt.Sprintf("default %s\ntimeout 0\nconsole-mode keep\neditor no\n", def)
}

// entryPlan is what syncSystemdBoot writes for one kernel.
type entryPlan struct {
	name    string // the entry's file name
	cmdline string // its options, FallbackFlag added when counted
	counted bool
}

// planEntries decides each bootable kernel's entry. An entry's boots are
// counted, and /init told it may reboot into a fallback (FallbackFlag), only
// where a fallback entry exists that systemd-boot would pick once it is
// bad, and that cannot itself reboot into it in turn: for the default
// kernel, any other good entry (the distribution's, whose boots kpreload
// never counts, or kpreload's of another kernel); for the others, only an
// entry that is not kpreload's. Two of kpreload's bad entries then never
// reboot into each other forever. Nothing is counted without a blesser
// (systemd-bless-boot or kpreload-boot-ok.service in the root), which marks
// an entry good once a boot comes up: without one, good entries would go
// bad too.
func planEntries(kernels []Kernel, def, cmdline string, others, blesser bool) map[string]entryPlan {
	bootable := 0
	for _, k := range kernels {
		if k.Bootable() {
			bootable++
		}
	}
	// The command line may come from a running system or an earlier entry
	// (entryCmdline): the flag is kpreload's to add, never to keep.
	var keep []string
	for _, f := range strings.Fields(cmdline) {
		if f != FallbackFlag && !strings.HasPrefix(f, "kpreload.fallback=") {
			keep = append(keep, f)
		}
	}
	base := strings.Join(keep, " ")
	plans := map[string]entryPlan{}
	for _, k := range kernels {
		if !k.Bootable() {
			continue
		}
		counted := blesser && (others || k.Release == def && bootable > 1)
		p := entryPlan{name: EntryName(k.Release), cmdline: base}
		if counted {
			p = entryPlan{name: CountedEntryName(k.Release), cmdline: strings.TrimSpace(base + " " + FallbackFlag), counted: true}
		}
		plans[k.Release] = p
	}
	return plans
}

// otherEntries reports whether the ESP e has a loader entry that is not
// kpreload's and is not bad (the distribution's, kernel-install's
// "<entry-token>-KVER.conf"): a fallback systemd-boot can pick.
func otherEntries(e espTree) bool {
	ents, _ := inroot.ReadDir(e.root, e.name(ESPEntriesDir))
	for _, ent := range ents {
		n := strings.ToLower(ent.Name())
		if !ent.Type().IsRegular() || !strings.HasSuffix(n, ".conf") || strings.HasPrefix(n, "kpreload-") {
			continue
		}
		if _, left := splitCounter(strings.TrimSuffix(n, ".conf")); left == 0 {
			continue // bad: sorted last, never picked while another is good
		}
		return true
	}
	return false
}

// withDefault returns loader.conf text conf with its default line naming
// entry (added when it has none).
func withDefault(conf, entry string) string {
	var out []string
	done := false
	for _, l := range strings.Split(strings.TrimRight(conf, "\n"), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "default" {
			if done {
				continue
			}
			l, done = "default "+entry, true
		}
		out = append(out, l)
	}
	if !done {
		out = append(out, "default "+entry)
	}
	return strings.Join(out, "\n") + "\n"
}

// syncSystemdBoot makes the ESP e match root's kernels: each bootable
// kernel's image, kpreload initramfs and entry (atomically, file by file), no
// kpreload entry for a kernel that is gone, and loader.conf's default on def.
// Every path is resolved inside root (the kernel's files) or the ESP's tree.
func syncSystemdBoot(root string, e espTree, kernels []Kernel, def, cmdline string) error {
	if _, err := inroot.Stat(e.root, e.name("loader")); err != nil {
		return fmt.Errorf("systemd-boot: %w (is the ESP mounted?)", err)
	}
	keep := map[string]bool{}
	blesser := exists(root, BootOKUnit) || slices.ContainsFunc(blessBoot, func(p string) bool { return exists(root, p) })
	plans := planEntries(kernels, def, cmdline, otherEntries(e), blesser)
	for _, k := range kernels {
		if !k.Bootable() {
			continue
		}
		plan := plans[k.Release]
		keep[plan.name] = true
		for _, c := range []struct{ src, dst string }{{KernelImagePath(k.Release), ESPKernelPath(k.Release)}, {InitramfsPath(k.Release), ESPInitrdPath(k.Release)}} {
			if err := copyInto(root, c.src, e.root, e.name(c.dst)); err != nil {
				return fmt.Errorf("systemd-boot: kernel %s: %w", k.Release, err)
			}
		}
		if err := inroot.MkdirAll(e.root, e.name(ESPEntriesDir), 0o755); err != nil {
			return fmt.Errorf("systemd-boot: %w", err)
		}
		if err := inroot.WriteFile(e.root, e.name(path.Join(ESPEntriesDir, plan.name)), []byte(LoaderEntry(k.Release, plan.cmdline)), 0o644); err != nil {
			return fmt.Errorf("systemd-boot: entry of %s: %w", k.Release, err)
		}
	}
	// With no kernel left to boot with kpreload (def ""), loader.conf is
	// left as it is: systemd-boot falls back to the first entry there is.
	if def != "" {
		pattern := LoaderDefault(def, plans[def].counted)
		text := LoaderConf(pattern)
		if b, err := inroot.ReadFile(e.root, e.name(ESPLoaderConf), inroot.MaxText); err == nil {
			text = withDefault(string(b), pattern)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("systemd-boot: %w", err)
		}
		if err := inroot.WriteFile(e.root, e.name(ESPLoaderConf), []byte(text), 0o644); err != nil {
			return fmt.Errorf("systemd-boot: %w", err)
		}
	}
	// Only after the new default is in place: drop what a removed kernel
	// left, an entry of a kept kernel under its other name (counted or
	// not, in any state systemd-boot renamed it to), and what a killed run
	// left half-written.
	for _, d := range []string{"loader", ESPEntriesDir} {
		removeStaleTemps(e.root, e.name(d))
	}
	for _, k := range kernels {
		removeStaleTemps(e.root, e.name(path.Join(espKernelsDir, k.Release)))
	}
	entries, _ := inroot.ReadDir(e.root, e.name(ESPEntriesDir))
	for _, ent := range entries {
		n := ent.Name()
		k, _, ok := ParseEntryName(n)
		if !ok || keep[n] || CheckRelease(k) != nil {
			continue
		}
		if err := inroot.Remove(e.root, e.name(path.Join(ESPEntriesDir, n))); err != nil {
			return fmt.Errorf("systemd-boot: %w", err)
		}
		if _, kept := plans[k]; kept {
			continue
		}
		if err := inroot.RemoveAll(e.root, e.name(path.Join(espKernelsDir, k))); err != nil {
			return fmt.Errorf("systemd-boot: %w", err)
		}
	}
	return nil
}

// copyInto copies the regular file src of the tree at srcRoot to dst of the
// tree at dstRoot (its directory made), atomically, both resolved inside
// their trees.
func copyInto(srcRoot, src, dstRoot, dst string) error {
	f, err := inroot.Open(srcRoot, src)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := inroot.MkdirAll(dstRoot, path.Dir(dst), 0o755); err != nil {
		return err
	}
	return inroot.WriteFrom(dstRoot, dst, f, 0o644)
}

// ErrMultilineCmdline is wrapped by the error for a kernel command line of
// more than one line: a loader entry's options must stay on one line.
var ErrMultilineCmdline = errors.New("the kernel command line holds more than one line")

// oneLine checks a kernel command line given in what (a flag, a file) and
// returns it trimmed.
func oneLine(what, s string) (string, error) {
	s = strings.TrimSpace(s)
	if strings.ContainsAny(s, "\n\r\x00") {
		return "", fmt.Errorf("%s: %w (write it on one line)", what, ErrMultilineCmdline)
	}
	return s, nil
}

// entryCmdline is the command line of root's systemd-boot entries: given,
// else root's Cmdline file, else (root is the running system) /proc/cmdline
// without what the boot loader added. A command line of more than one line
// is an error naming where it came from; the kernel hooks (lenient) warn
// instead and take the next source, then the options of kpreload's entry
// already on the ESP e.
func entryCmdline(root string, e espTree, given string, lenient bool) (cmdline string, warnings []string, err error) {
	bad := func(err error) error {
		if !lenient {
			return err
		}
		warnings = append(warnings, err.Error())
		return nil
	}
	if strings.TrimSpace(given) != "" {
		s, err := oneLine("--cmdline", given)
		if err == nil {
			return s, nil, nil
		}
		if err := bad(err); err != nil {
			return "", nil, err
		}
	}
	b, err := inroot.ReadFile(root, Cmdline, inroot.MaxText)
	switch {
	case err == nil:
		s, err := oneLine(inroot.Host(root, Cmdline), string(b))
		if err == nil {
			return s, warnings, nil
		}
		if err := bad(err); err != nil {
			return "", nil, err
		}
	case !errors.Is(err, fs.ErrNotExist):
		if err := bad(fmt.Errorf("kernel command line: %w", err)); err != nil {
			return "", nil, err
		}
	}
	if filepath.Clean(root) == "/" {
		b, err := inroot.ReadPath("/proc/cmdline", inroot.MaxAttr)
		if err != nil {
			return "", warnings, fmt.Errorf("kernel command line: %w", err)
		}
		var keep []string
		for _, f := range strings.Fields(string(b)) {
			if !strings.HasPrefix(f, "BOOT_IMAGE=") && !strings.HasPrefix(f, "initrd=") {
				keep = append(keep, f)
			}
		}
		return strings.Join(keep, " "), warnings, nil
	}
	if len(warnings) > 0 {
		if s, ok := lastOptions(e); ok {
			warnings = append(warnings, "keeping the kernel command line of kpreload's entries on the ESP: "+s)
			return s, warnings, nil
		}
	}
	return "", warnings, fmt.Errorf("no kernel command line for systemd-boot entries: write it to /%s in the root (root=UUID=... rw ...)", Cmdline)
}

// lastOptions returns the options line of one of kpreload's entries on the
// ESP (the last good command line), if there is one.
func lastOptions(e espTree) (string, bool) {
	ents, _ := inroot.ReadDir(e.root, e.name(ESPEntriesDir))
	for _, ent := range ents {
		n := ent.Name()
		if !strings.HasPrefix(n, "kpreload-") || !strings.HasSuffix(n, ".conf") {
			continue
		}
		b, err := inroot.ReadFile(e.root, e.name(path.Join(ESPEntriesDir, n)), inroot.MaxText)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "options "); ok && strings.TrimSpace(v) != "" {
				return strings.TrimSpace(v), true
			}
		}
	}
	return "", false
}
