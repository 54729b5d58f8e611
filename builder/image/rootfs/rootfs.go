// Package rootfs makes an image's root filesystem: mmdebstrap's tarball
// (cached by Key for a day), unpacked, then configured as an image (fstab,
// identity reset, cloud-init, units, extra files), each tool behind a small
// interface.
package rootfs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kpreload/kpreload/builder/image/rootfiles"
	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/internal/progress"
)

// BasePackages are installed into every image on top of mmdebstrap's minbase
// variant: systemd as init, udev, kmod, dbus (logind, systemctl), e2fsprogs and
// dosfstools (fsck of the root and the ESP at boot).
var BasePackages = []string{"systemd-sysv", "udev", "kmod", "dbus", "e2fsprogs", "dosfstools"}

// initramfsToolControl is the control file of kpreload-initramfs-tool, a tiny
// package built on the fly and installed into every image. Debian's kernel
// packages depend on "initramfs-tools | linux-initramfs-tool"; kpreload makes
// the image's initramfs itself (Stage, and the zz-kpreload hook for kernels
// installed later), so this package satisfies the dependency instead of
// initramfs-tools. Installing initramfs-tools and ignoring its initrd would
// cost a mkinitramfs run per kernel at build time and at every kernel update,
// leave a second, unused 14 MB initrd per kernel in /boot, and make two hooks
// fight over what boots. Being a real, installed package, it also keeps apt
// from pulling initramfs-tools in when a kernel is installed later.
const initramfsToolControl = `Package: kpreload-initramfs-tool
Version: 1.0
Architecture: all
Maintainer: kpreload <kpreload@localhost>
Priority: optional
Section: kernel
Provides: linux-initramfs-tool
Description: kpreload makes this system's initramfs
 The kpreload kernel install hook (/etc/kernel/postinst.d/zz-kpreload) builds
 the initramfs of every kernel from its module tree and the precompiled driver
 cache. This package stands in for initramfs-tools.
`

// Spec is what decides the root filesystem tarball mmdebstrap makes.
type Spec struct {
	// Suite is the Debian release.
	Suite string
	// Sources are the apt sources lines ("deb URL suite components").
	Sources []string
	// Packages are installed on top of the minbase variant.
	Packages []string
	// Date is the UTC day (YYYY-MM-DD) the archive was read.
	Date string
	// DistributionInitramfs leaves out the stand-in initramfs tool: the
	// packages bring initramfs-tools (a plain image).
	DistributionInitramfs bool
}

// Key is the cache key of a root filesystem tarball: the SHA-256 of the
// suite, the apt sources, the package list, the stand-in initramfs tool's
// control file and the UTC day. A cached tarball is reused only for the same
// inputs on the same day, so it is never older than a day: what a rebuild on
// that day could differ in is an archive update published since, the same
// exposure as building from a day-old mirror snapshot, and the next day's build
// reads the archive again. Pinned inputs (kernel releases, driver versions)
// never change under one key; set Options.CacheDir to "off" to always read the
// archive.
func Key(s Spec) string {
	h := sha256.New()
	fmt.Fprintf(h, "kpreload-rootfs/1\nsuite %s\n", s.Suite)
	for _, l := range s.Sources {
		fmt.Fprintf(h, "source %s\n", l)
	}
	for _, p := range s.Packages {
		fmt.Fprintf(h, "package %s\n", p)
	}
	if s.DistributionInitramfs {
		fmt.Fprintf(h, "tool initramfs-tools\ndate %s\n", s.Date)
	} else {
		fmt.Fprintf(h, "tool %s\ndate %s\n", initramfsToolControl, s.Date)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Tarball returns a tarball of the root filesystem of spec: from
// cacheDir when one with its key is there, else made with mmdebstrap (and
// stored in cacheDir unless it is "off"). work is a scratch directory.
func Tarball(ctx context.Context, t Tools, spec Spec, cacheDir, work string, report func(string)) (tarball string, info Info, err error) {
	key := Key(spec)
	info = Info{Key: key, Packages: spec.Packages, Date: spec.Date}
	cached := ""
	if cacheDir != "off" {
		cached = filepath.Join(cacheDir, key+".tar")
		if _, err := os.Stat(cached); err == nil {
			info.Cached = true
			progress.Say(report, "rootfs: reusing %s (same packages and sources today)", cached)
			return cached, info, nil
		}
	}
	if _, err := t.Runner.LookPath("mmdebstrap"); err != nil {
		return "", info, fmt.Errorf("rootfs: mmdebstrap is missing (install it with scripts/deps.sh): %w", err)
	}
	deb := ""
	if !spec.DistributionInitramfs {
		toolDir := filepath.Join(work, "deb")
		if err := os.MkdirAll(filepath.Join(toolDir, "pkg", "DEBIAN"), 0o755); err != nil {
			return "", info, err
		}
		if err := os.WriteFile(filepath.Join(toolDir, "pkg", "DEBIAN", "control"), []byte(initramfsToolControl), 0o644); err != nil {
			return "", info, err
		}
		deb = filepath.Join(toolDir, "kpreload-initramfs-tool.deb")
		if err := t.Dpkg.BuildDeb(ctx, filepath.Join(toolDir, "pkg"), deb); err != nil {
			return "", info, fmt.Errorf("rootfs: build kpreload-initramfs-tool: %w", err)
		}
	}
	out := filepath.Join(work, "rootfs.tar")
	if cached != "" {
		if err := os.MkdirAll(cacheDir, 0o755); err != nil {
			return "", info, fmt.Errorf("rootfs cache: %w", err)
		}
		f, err := os.CreateTemp(cacheDir, ".tmp-"+key+"-*.tar")
		if err != nil {
			return "", info, fmt.Errorf("rootfs cache: %w", err)
		}
		f.Close()
		out = f.Name()
		defer os.Remove(out) // renamed into place on success
	}
	args := MmdebstrapArgs(spec, deb, out)
	progress.Say(report, "rootfs: mmdebstrap %s with %d packages (%s)", spec.Suite, len(spec.Packages), strings.Join(spec.Packages, " "))
	start := time.Now()
	if err := t.Mmdebstrap.Mmdebstrap(ctx, args); err != nil {
		return "", info, fmt.Errorf("rootfs: %w", err)
	}
	progress.Say(report, "rootfs: mmdebstrap done in %.0fs", time.Since(start).Seconds())
	if cached == "" {
		return out, info, nil
	}
	if err := fileutil.Publish(out, cached); err != nil {
		return "", info, fmt.Errorf("rootfs cache: %w", err)
	}
	pruneCache(cacheDir, cached)
	return cached, info, nil
}

// cacheMaxAge is how long tarballs stay in the rootfs cache: a key holds
// its day, so older tarballs can never be used again.
const cacheMaxAge = 48 * time.Hour

// pruneCache removes tarballs (and leftovers of killed builds) older than
// cacheMaxAge from dir, keeping keep.
func pruneCache(dir, keep string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		info, err := e.Info()
		if err != nil || p == keep || !strings.HasSuffix(e.Name(), ".tar") || !info.Mode().IsRegular() {
			continue
		}
		if time.Since(info.ModTime()) > cacheMaxAge {
			os.Remove(p)
		}
	}
}

// MmdebstrapArgs is mmdebstrap's command line for spec: the minbase variant,
// the packages and the stand-in initramfs tool (copied into the chroot, where
// apt's dpkg can see it, and removed again), written as a tarball to out.
func MmdebstrapArgs(spec Spec, deb, out string) []string {
	include := append([]string{}, spec.Packages...)
	var hooks []string
	if deb != "" {
		debDir := filepath.Dir(deb)
		include = append(include, deb)
		hooks = []string{
			"--setup-hook=mkdir -p \"$1" + debDir + "\" && cp " + shellQuote(deb) + " \"$1" + debDir + "/\"",
			"--customize-hook=rm -rf \"$1" + debDir + "\"",
		}
	}
	args := append([]string{"--variant=minbase", "--include=" + strings.Join(include, ",")}, hooks...)
	args = append(args,
		// No apt lists and .debs in the image: apt update on first use.
		"--customize-hook=rm -rf \"$1\"/var/lib/apt/lists/* \"$1\"/var/cache/apt/*.bin",
		spec.Suite, out,
	)
	return append(args, spec.Sources...)
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Unpack unpacks a root filesystem tarball into dir as it is (owners,
// modes, device nodes, extended attributes).
func Unpack(ctx context.Context, t Mmdebstrap, tarball, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := t.Unpack(ctx, tarball, dir); err != nil {
		return fmt.Errorf("rootfs: unpack %s: %w", tarball, err)
	}
	return nil
}

// An image is copied to every instance made from it, so it must carry nothing
// that identifies one machine: no SSH host keys (anyone holding one instance
// could impersonate the others), no machine-id (journald, DHCP client ids and
// dbus derive from it), no random seed. Each instance makes its own at first
// boot: systemd writes /etc/machine-id when it finds it empty, cloud-init (in
// images built with CloudInit) or kpreload-ssh-host-keys.service the host keys.

// CloudInitPackages are what Options.CloudInit adds: Debian's cloud-init,
// growpart (cloud-guest-utils) to grow the root partition to the disk, the
// SSH server whose keys and users it sets up, sudo for the default user, and
// iproute2, which Debian's cloud images carry (priority important): without
// ip (or ifconfig) cloud-init's netinfo cannot print the network and warns,
// a recoverable error in cloud-init status.
var CloudInitPackages = []string{"cloud-init", "cloud-guest-utils", "openssh-server", "sudo", "iproute2"}

// cloudInitConfigPath is the cloud-init configuration a CloudInit image adds.
const cloudInitConfigPath = "etc/cloud/cloud.cfg.d/90-kpreload.cfg"

// cloudInitConfig names the datasources the clouds use, in the order
// cloud-init tries them (NoCloud and ConfigDrive first: seeds on a disk need
// no network), grows the root partition and filesystem to the disk, and
// keeps the system's locale, C.UTF-8 (systemLocale): cloud-init's default,
// en_US.UTF-8, is not generated in the image, and its locale module then
// fails (update-locale exits 255: an error in cloud-init status).
const cloudInitConfig = `# Written by kpreload image build.
datasource_list: [ NoCloud, ConfigDrive, Ec2, GCE, Azure, OpenStack, None ]
# The image's locale (/etc/default/locale), which glibc has built in; user-data may ask another.
locale: C.UTF-8
growpart:
  mode: auto
  devices: ['/']
resize_rootfs: true
# The instance's hostname (from its metadata) in /etc/hosts, so it resolves.
manage_etc_hosts: true
`

// sshHostKeysUnit makes an instance's SSH host keys at its first boot where
// nothing else did (cloud-init does, where it runs first).
const sshHostKeysUnit = `# Written by kpreload image build: the image carries no SSH host keys.
[Unit]
Description=Make this instance's SSH host keys
ConditionPathExists=/usr/sbin/sshd
ConditionPathExistsGlob=!/etc/ssh/ssh_host_*_key
After=cloud-init.service
Before=ssh.service

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target
`

// SSHHostKeysUnitName is sshHostKeysUnit's name.
const SSHHostKeysUnitName = "kpreload-ssh-host-keys.service"

// ResetIdentity removes what identifies one machine from root: SSH host keys,
// the machine-id (left empty, so systemd makes one at first boot), dbus's own
// copy and systemd's random seed; and, where the root has an SSH server,
// enables sshHostKeysUnit.
func ResetIdentity(ctx context.Context, sc Systemctl, root string) error {
	keys, err := filepath.Glob(filepath.Join(root, "etc/ssh/ssh_host_*"))
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := os.Remove(k); err != nil {
			return fmt.Errorf("identity: %w", err)
		}
	}
	if err := fileutil.WriteAtomicAll(filepath.Join(root, "etc/machine-id"), nil, 0o444, false); err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	for _, p := range []string{"var/lib/dbus/machine-id", "var/lib/systemd/random-seed"} {
		fi, err := os.Lstat(filepath.Join(root, p))
		if errors.Is(err, fs.ErrNotExist) || (err == nil && fi.Mode()&fs.ModeSymlink != 0) {
			continue // absent, or a link to /etc/machine-id
		}
		if err := os.Remove(filepath.Join(root, p)); err != nil {
			return fmt.Errorf("identity: %w", err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "usr/sbin/sshd")); err != nil {
		return nil
	}
	if err := fileutil.WriteAtomicAll(filepath.Join(root, "etc/systemd/system", SSHHostKeysUnitName), []byte(sshHostKeysUnit), 0o644, false); err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	if err := sc.Enable(ctx, root, SSHHostKeysUnitName); err != nil {
		return fmt.Errorf("identity: enable %s: %w", SSHHostKeysUnitName, err)
	}
	return nil
}

// systemLocale is /etc/default/locale of a CloudInit image whose root sets
// none: C.UTF-8, built into glibc, so nothing has to be generated.
const systemLocale = "# Written by kpreload image build.\nLANG=C.UTF-8\n"

// ConfigureCloudInit writes cloudInitConfig into a root that has cloud-init,
// and systemLocale where the root has no /etc/default/locale.
func ConfigureCloudInit(root string) error {
	if _, err := os.Stat(filepath.Join(root, "usr/bin/cloud-init")); err != nil {
		return fmt.Errorf("cloud-init: not installed in the image: %w", err)
	}
	if err := fileutil.WriteAtomicAll(filepath.Join(root, cloudInitConfigPath), []byte(cloudInitConfig), 0o644, false); err != nil {
		return err
	}
	if _, err := os.Lstat(filepath.Join(root, "etc/default/locale")); errors.Is(err, fs.ErrNotExist) {
		return fileutil.WriteAtomicAll(filepath.Join(root, "etc/default/locale"), []byte(systemLocale), 0o644, false)
	} else if err != nil {
		return fmt.Errorf("cloud-init: %w", err)
	}
	return nil
}

// Configure makes the root tree bootable as an image: fstab (root and ESP
// by UUID), the ESP mount point, hostname, networking by DHCP through
// systemd-networkd, kpreload's units as their presets say (when the image
// carries kpreload), and optionally an empty root password.
func Configure(ctx context.Context, sc Systemctl, root, rootUUID, espUUID string, emptyRootPassword, kpreload bool) error {
	fstab := fmt.Sprintf("# kpreload image: root and EFI system partition by filesystem UUID\nUUID=%s / ext4 errors=remount-ro 0 1\nUUID=%s /%s vfat umask=0077 0 1\n", rootUUID, espUUID, install.ESPMount)
	files := map[string]string{
		"etc/fstab":    fstab,
		"etc/hostname": "kpreload\n",
		"etc/hosts":    "127.0.0.1\tlocalhost\n127.0.1.1\tkpreload\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"etc/systemd/network/80-kpreload-dhcp.network": "[Match]\nName=en* eth*\n\n[Network]\nDHCP=yes\n",
	}
	for name, content := range files {
		if err := fileutil.WriteAtomicAll(filepath.Join(root, name), []byte(content), 0o644, false); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(root, install.ESPMount), 0o755); err != nil {
		return err
	}
	if err := sc.Enable(ctx, root, "systemd-networkd.service"); err != nil {
		return fmt.Errorf("enable systemd-networkd: %w", err)
	}
	if !kpreload {
		return setRootPassword(root, emptyRootPassword)
	}
	// kpreload's own units (rootfiles) are enabled as their preset file says.
	units, err := fs.Glob(rootfiles.FS, "files/usr/lib/systemd/system/kpreload-*")
	if err != nil {
		return err
	}
	for i, u := range units {
		units[i] = path.Base(u)
	}
	if err := sc.Preset(ctx, root, units...); err != nil {
		return fmt.Errorf("preset kpreload units: %w", err)
	}
	return setRootPassword(root, emptyRootPassword)
}

// setRootPassword clears root's password when empty is set.
func setRootPassword(root string, empty bool) error {
	if !empty {
		return nil
	}
	return SetEmptyRootPassword(filepath.Join(root, "etc", "shadow"))
}

// SetEmptyRootPassword clears root's password in a shadow file, so root logs
// in on the console without one.
func SetEmptyRootPassword(shadow string) error {
	b, err := os.ReadFile(shadow)
	if err != nil {
		return err
	}
	lines := strings.Split(string(b), "\n")
	found := false
	for i, l := range lines {
		fields := strings.Split(l, ":")
		if len(fields) > 2 && fields[0] == "root" {
			fields[1] = ""
			lines[i] = strings.Join(fields, ":")
			found = true
		}
	}
	if !found {
		return fmt.Errorf("%s has no root entry", shadow)
	}
	return fileutil.WriteAtomicAll(shadow, []byte(strings.Join(lines, "\n")), 0o640, false)
}

// KernelPackages returns the installed version of each kernel's linux-image
// package in root's dpkg database.
func KernelPackages(ctx context.Context, dpkg Dpkg, root string, kernels []string) (map[string]string, error) {
	out := map[string]string{}
	for _, k := range kernels {
		v, err := dpkg.InstalledVersion(ctx, filepath.Join(root, "var/lib/dpkg"), "linux-image-"+k)
		if err != nil {
			return nil, fmt.Errorf("kernel %s is not installed in the root filesystem: %w", k, err)
		}
		out[k] = v
	}
	return out, nil
}

// AddFiles copies extra files into the root (Options.Files), keeping modes.
func AddFiles(root string, files map[string]string) error {
	for _, dst := range slices.Sorted(maps.Keys(files)) {
		src := files[dst]
		fi, err := os.Stat(src)
		if err != nil {
			return fmt.Errorf("file %s: %w", dst, err)
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return fmt.Errorf("file %s: %w", dst, err)
		}
		p := filepath.Join(root, dst)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("file %s: %w", dst, err)
		}
		if err := os.WriteFile(p, b, fi.Mode().Perm()); err != nil {
			return fmt.Errorf("file %s: %w", dst, err)
		}
		if err := os.Chmod(p, fi.Mode().Perm()); err != nil {
			return fmt.Errorf("file %s: %w", dst, err)
		}
	}
	return nil
}

// Info says how the root filesystem was made.
type Info struct {
	// Key is Key's digest of the mmdebstrap inputs.
	Key string `json:"key"`
	// Packages are the packages asked of mmdebstrap (beyond its minimal variant).
	Packages []string `json:"packages"`
	// Cached is set when the tarball came from the cache directory.
	Cached bool `json:"cached"`
	// Date is the UTC day the tarball was made (part of the key).
	Date string `json:"date"`
}
