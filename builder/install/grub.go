package install

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/builder/internal/sandbox"
	"github.com/kpreload/kpreload/internal/inroot"
)

// GrubScriptText is /etc/grub.d/09_kpreload. grub-mkconfig runs it before
// Debian's 10_linux, so kpreload's entries come first and GRUB_DEFAULT=0 (the
// default) boots the first of them. The shell only gathers what GRUB's own
// library knows (how to reach /boot, its path on its filesystem); the entries
// are written by `kpreload kernel-hook grub-entries`.
const GrubScriptText = `#!/bin/sh
# kpreload: GRUB menu entries booting kpreload's initramfs, written before
# Debian's 10_linux so that the default entry boots it. The distribution's
# initramfs stays bootable as its own entry. Installed by "kpreload install";
# "kpreload kernel-hook grub-entries --help" says what it prints.
set -e
[ -x /usr/bin/kpreload ] || exit 0
prefix="/usr"
exec_prefix="/usr"
datarootdir="/usr/share"
. "$pkgdatadir/grub-mkconfig_lib"
KPRELOAD_GRUB_PREPARE="$(prepare_grub_to_access_device ${GRUB_DEVICE_BOOT} | grub_add_tab)"
KPRELOAD_GRUB_BOOT_PATH="$(make_system_path_relative_to_its_root /boot)"
export KPRELOAD_GRUB_PREPARE KPRELOAD_GRUB_BOOT_PATH
exec /usr/bin/kpreload kernel-hook grub-entries
`

// GrubEnv is what grub-mkconfig tells its scripts, as GrubEntries needs it.
type GrubEnv struct {
	// Prepare are the GRUB commands that reach /boot's filesystem
	// (prepare_grub_to_access_device), one tab-indented command a line.
	Prepare string
	// BootPath is /boot's path on its own filesystem ("/boot", or "" when
	// /boot is a filesystem of its own).
	BootPath string
	// Device and DeviceUUID are the root filesystem's device and UUID.
	Device, DeviceUUID string
	// DisableUUID is GRUB_DISABLE_LINUX_UUID=true: root= names the device.
	DisableUUID bool
	// Cmdline and CmdlineDefault are GRUB_CMDLINE_LINUX and GRUB_CMDLINE_LINUX_DEFAULT.
	Cmdline, CmdlineDefault string
	// Distributor is GRUB_DISTRIBUTOR ("Debian").
	Distributor string
	// Log receives warnings (a boot.yaml that cannot be used); grub-mkconfig
	// shows a script's standard error (nil: discarded).
	Log io.Writer
}

// GrubEnvFromEnviron reads GrubEnv from the environment grub-mkconfig gives
// /etc/grub.d scripts (and the two variables GrubScriptText adds).
func GrubEnvFromEnviron(getenv func(string) string) GrubEnv {
	return GrubEnv{
		Prepare:        getenv("KPRELOAD_GRUB_PREPARE"),
		BootPath:       getenv("KPRELOAD_GRUB_BOOT_PATH"),
		Device:         getenv("GRUB_DEVICE"),
		DeviceUUID:     getenv("GRUB_DEVICE_UUID"),
		DisableUUID:    getenv("GRUB_DISABLE_LINUX_UUID") == "true",
		Cmdline:        getenv("GRUB_CMDLINE_LINUX"),
		CmdlineDefault: getenv("GRUB_CMDLINE_LINUX_DEFAULT"),
		Distributor:    getenv("GRUB_DISTRIBUTOR"),
	}
}

// GrubEntryID is the menu entry id (GRUB_DEFAULT may name it) of a kernel's
// kpreload entry.
func GrubEntryID(kernel string) string { return "kpreload-" + kernel }

// GrubDistributionEntryID is the menu entry id of the entry booting a
// kernel with the distribution's initramfs, which kpreload writes for the
// default kernel.
func GrubDistributionEntryID(kernel string) string { return "kpreload-distribution-" + kernel }

// grubFallbackVar is the GRUB variable that carries FallbackFlag onto a
// kpreload entry's linux line once the fallback is saved.
const grubFallbackVar = "kpreload_fallback"

// FallbackFlag is the kernel command line flag of a kpreload entry whose boot
// loader has a fallback entry ready for the next boot (pid1.FallbackFlag):
// /init may reboot into it when the root cannot be mounted.
const FallbackFlag = "kpreload.fallback=1"

// grubFallbackOf is the fallback entry of order[i], kpreload's entry of a
// kernel: the distribution initramfs's entry dist when there is one, else
// kpreload's entry of the next kernel in order, else none (""). The chain
// never loops back, so bad entries cannot reboot into each other forever.
func grubFallbackOf(order []string, i int, dist string) string {
	switch {
	case dist != "":
		return dist
	case i+1 < len(order):
		return GrubEntryID(order[i+1])
	}
	return ""
}

// grubFallback is the GRUB script, run when a kpreload entry is chosen and
// before its linux command, that makes the fallback entry id GRUB's
// one-shot next_entry (Debian's 00_header boots it on the next boot and
// clears it), and sets grubFallbackVar to FallbackFlag only when save_env
// could store it (it cannot on every /boot: btrfs, LVM, RAID), so that
// /init reboots only into a fallback that is there. `kpreload kernel-hook
// boot-ok` clears next_entry once the real init runs.
func grubFallback(id string) string {
	return "\tset " + grubFallbackVar + "=\n" +
		"\tset next_entry='" + GrubQuote(id) + "'\n" +
		"\tif save_env next_entry; then set " + grubFallbackVar + "=" + FallbackFlag + "; fi\n"
}

// GrubEntries writes the GRUB menu entries of root's kernels: kpreload's
// entry for the default kernel (DefaultKernel) first, then kpreload's entries
// of the other bootable kernels, newest first, then the default kernel with
// the distribution's initramfs, as a way back. Where the root has
// kpreload-boot-ok.service (BootOKUnit), which clears it once a boot comes
// up, each kpreload entry with a fallback (grubFallbackOf) saves it as GRUB's one-shot next_entry before it
// boots and tells /init so (FallbackFlag): a root that cannot be mounted
// reboots into the fallback once. Nothing is written when no kernel has a
// kpreload initramfs.
func GrubEntries(w io.Writer, root string, env GrubEnv) error {
	kernels, err := Kernels(root)
	if err != nil {
		return err
	}
	// grub-mkconfig must finish over a bad boot.yaml: the defaults, and a
	// warning on its standard error.
	st, warnings := ReadSettingsOrDefaults(root)
	if env.Log != nil {
		for _, w := range warnings {
			fmt.Fprintf(env.Log, "kpreload: WARNING: %s\n", w)
		}
	}
	def := DefaultKernel(kernels, st.NewestFirst())
	if def == "" {
		return nil
	}
	// A title is one line: GRUB_DISTRIBUTOR's control characters (a newline
	// that would start a command of its own) become spaces, as do runs of blanks.
	osName := strings.Join(strings.FieldsFunc(env.Distributor, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r)
	}), " ")
	if osName == "" {
		osName = "Debian"
	}
	osName += " GNU/Linux"
	rootArg := "root=UUID=" + env.DeviceUUID
	if env.DeviceUUID == "" || env.DisableUUID {
		rootArg = "root=" + env.Device
	}
	args := strings.Join(strings.Fields(rootArg+" ro "+env.Cmdline+" "+env.CmdlineDefault), " ")
	var b bytes.Buffer
	entry := func(k, title, id, initrd, fallback string) {
		fmt.Fprintf(&b, "menuentry '%s' --class debian --class gnu-linux --class gnu --class os $menuentry_id_option '%s' {\n",
			GrubQuote(fmt.Sprintf("%s, with Linux %s (%s)", osName, k, title)), GrubQuote(id))
		b.WriteString("\tinsmod gzio\n")
		if p := strings.TrimRight(env.Prepare, "\n"); p != "" {
			b.WriteString(p + "\n")
		}
		line := args
		if fallback != "" {
			b.WriteString(grubFallback(fallback))
			line += " ${" + grubFallbackVar + "}"
		}
		fmt.Fprintf(&b, "\techo\t'%s'\n", GrubQuote(fmt.Sprintf("Loading Linux %s (%s) ...", k, title)))
		fmt.Fprintf(&b, "\tlinux\t%s/vmlinuz-%s %s\n", env.BootPath, k, line)
		fmt.Fprintf(&b, "\tinitrd\t%s/%s\n", env.BootPath, initrd)
		b.WriteString("}\n")
	}
	fmt.Fprintf(&b, "# kpreload: default %s (%s)\n", def, st.DescribeDefault(kernels, def))
	order := []string{def}
	for _, k := range kernels {
		if k.Bootable() && k.Release != def {
			order = append(order, k.Release)
		}
	}
	dist := ""
	if kernelState(root, def).DistInitramfs {
		dist = GrubDistributionEntryID(def)
	}
	// next_entry must be taken back once a boot comes up, or every other
	// boot would be the fallback's: without kpreload-boot-ok.service, none.
	takeBack := exists(root, BootOKUnit)
	for i, k := range order {
		fallback := ""
		if takeBack {
			fallback = grubFallbackOf(order, i, dist)
		}
		entry(k, "kpreload", GrubEntryID(k), strings.TrimPrefix(InitramfsPath(k), "boot/"), fallback)
	}
	if dist != "" {
		entry(def, "distribution initramfs", dist, "initrd.img-"+def, "")
	}
	_, err = w.Write(b.Bytes())
	return err
}

// GrubQuote quotes s for the inside of a single-quoted GRUB script word, as
// grub-mkconfig_lib's grub_quote does for Debian's 10_linux: each ' becomes
// '\” (close the quote, an escaped quote, open it again).
func GrubQuote(s string) string { return strings.ReplaceAll(s, "'", `'\''`) }

// UpdateGrub runs update-grub in root (grub-mkconfig -o /boot/grub/grub.cfg
// where the root has no update-grub). When root is not "/" it is the root's
// own program, run in its sandbox (builder/internal/sandbox): the root as /,
// no network, no capabilities, a /proc and /dev of its own, with the block
// devices holding the root (sandbox.RootDevices) and the host's /sys read
// only, which grub-probe examines. The programs run through runner.Default
// (UpdateGrubWith takes another).
func UpdateGrub(ctx context.Context, root string, log io.Writer) error {
	return UpdateGrubWith(nil)(ctx, root, log)
}

// UpdateGrubWith returns UpdateGrub running its programs through run (nil:
// runner.Default), as Options.UpdateGrub.
func UpdateGrubWith(run runner.Runner) func(ctx context.Context, root string, log io.Writer) error {
	run = runner.Or(run)
	return func(ctx context.Context, root string, log io.Writer) error {
		return updateGrub(ctx, run, root, log)
	}
}

// updateGrub is UpdateGrub with its programs run by run.
func updateGrub(ctx context.Context, run runner.Runner, root string, log io.Writer) error {
	argv := []string{"update-grub"}
	if !exists(root, "usr/sbin/update-grub") {
		argv = []string{"grub-mkconfig", "-o", "/" + GrubConfig}
	}
	seen := &grubProbeNoise{w: log}
	var err error
	if filepath.Clean(root) == "/" {
		_, err = run.Run(ctx, runner.Cmd{Name: argv[0], Args: argv[1:], Env: []string{"PATH=" + sandbox.Path}, Log: seen})
	} else {
		_, err = sandbox.Run(ctx, run, sandbox.Spec{Root: root, Argv: argv, Devices: sandbox.RootDevices(root), HostSys: true, Log: seen})
	}
	if err != nil {
		return fmt.Errorf("%w (grub.cfg was left as it was)", err)
	}
	if seen.found && log != nil {
		fmt.Fprintln(log, GrubProbeNoiseNote)
	}
	return nil
}

// GrubProbeNoise is what grub-probe prints, once per probe, when it runs in
// the sandbox of a root mounted from a disk image through a loop device: it
// looks up the loop device's backing file, a path of the host that the
// sandbox does not have.
const GrubProbeNoise = "failed to get canonical path of"

// GrubProbeNoiseNote is the line UpdateGrub adds after update-grub's output
// when it holds GrubProbeNoise.
const GrubProbeNoiseNote = `kpreload: grub-probe's "` + GrubProbeNoise + ` ..." above, and the usage lines after each, are harmless: in the sandbox of a loop-mounted image grub-probe cannot find the loop device's backing file, a path of this machine; grub.cfg was written all the same (it finds the root by UUID or label), and its default entry is checked next`

// grubProbeNoise passes what it is given on to w and notes GrubProbeNoise.
type grubProbeNoise struct {
	w     io.Writer
	tail  []byte
	found bool
}

func (g *grubProbeNoise) Write(p []byte) (int, error) {
	// A line may arrive in pieces: look at the end of the last write too.
	buf := append(g.tail, p...)
	if bytes.Contains(buf, []byte(GrubProbeNoise)) {
		g.found = true
	}
	g.tail = append([]byte(nil), buf[max(0, len(buf)-len(GrubProbeNoise)):]...)
	if g.w == nil {
		return len(p), nil
	}
	return g.w.Write(p)
}

// CheckGrubConfig reads root's grub.cfg and says whether its default entry
// boots kpreload's initramfs: the first menu entry must be kpreload's for
// kernel, and the default that entry (0) or another of kpreload's entries
// (GRUB_DEFAULT=kpreload-KVER pins one).
func CheckGrubConfig(root, kernel string) error {
	p := inroot.Host(root, GrubConfig)
	f, err := inroot.Open(root, GrubConfig)
	if err != nil {
		return fmt.Errorf("read GRUB's configuration: %w", err)
	}
	defer f.Close()
	id := GrubEntryID(kernel)
	def, first := "", ""
	sc := bufio.NewScanner(io.LimitReader(f, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		// 00_header sets the default twice: to a one-time next_entry if
		// there is one, else to GRUB_DEFAULT. The second is the one that lasts.
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "set default="); ok && !strings.Contains(v, "next_entry") && def == "" {
			def = strings.Trim(v, `"`)
		}
		if first == "" && (strings.HasPrefix(l, "menuentry ") || strings.HasPrefix(l, "submenu ")) {
			first = l
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	switch {
	case first == "":
		return fmt.Errorf("%s has no menu entry", p)
	case !strings.Contains(first, "'"+id+"'"):
		return fmt.Errorf("%s: the first menu entry is not kpreload's for %s (is /%s executable? it is: %q)", p, kernel, GrubScript, first)
	case def != "0" && (!strings.HasPrefix(def, "kpreload-") || strings.HasPrefix(def, "kpreload-distribution-")):
		return fmt.Errorf("%s: the default entry is %q, not kpreload's: set GRUB_DEFAULT=0 (or %s) in /etc/default/grub and run update-grub", p, def, id)
	}
	return nil
}

// DistributionGrubHook returns the hook of grub2-common that regenerates
// grub.cfg after kpreload's own in the kernel packages' run-parts
// (/etc/kernel/<phase>.d/zz-update-grub sorts after zz-kpreload), or "" when
// it will not run. It runs, as its own code says, when update-grub is
// installed, the system is not a container, the package's maintainer-script
// mode (DEB_MAINT_PARAMS, read through env) is empty or "configure" after
// an install, empty or "remove" after a removal, and grub.cfg exists. Only
// then may kpreload's hook leave grub.cfg to it.
func DistributionGrubHook(root, phase string, env func(string) string) string {
	return DistributionGrubHookWith(nil, root, phase, env)
}

// DistributionGrubHookWith is DistributionGrubHook asking
// systemd-detect-virt through run (nil: runner.Default).
func DistributionGrubHookWith(run runner.Runner, root, phase string, env func(string) string) string {
	hook := path.Join("/etc/kernel", phase+".d", "zz-update-grub")
	if fi, err := inroot.Stat(root, hook); err != nil || fi.Mode()&0o111 == 0 {
		return ""
	}
	if !exists(root, "usr/sbin/update-grub") || !exists(root, GrubConfig) {
		return ""
	}
	// As zz-update-grub asks: systemd-detect-virt --container (on this
	// system), else systemd's marker of a container.
	if root == "/" {
		if _, err := runner.Or(run).Run(context.Background(), runner.Cmd{Name: "systemd-detect-virt", Args: []string{"--quiet", "--container"}}); err == nil {
			return ""
		}
	}
	if exists(root, "run/systemd/container") {
		return ""
	}
	mode := ""
	if f := strings.Fields(env("DEB_MAINT_PARAMS")); len(f) > 0 {
		mode = strings.Trim(f[0], "'")
	}
	switch {
	case mode == "":
	case phase == "postinst" && mode == "configure":
	case phase == "postrm" && mode == "remove":
	default:
		return ""
	}
	return hook
}
