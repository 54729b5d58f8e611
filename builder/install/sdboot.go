package install

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/internal/fileutil"
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
// "kpreload-6.1.0-56-cloud-amd64.conf".
func EntryName(kernel string) string { return "kpreload-" + kernel + ".conf" }

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
// default with no menu delay (the menu still appears while a key is held).
func LoaderConf(defaultKernel string) string {
	return fmt.Sprintf("default %s\ntimeout 0\nconsole-mode keep\neditor no\n", EntryName(defaultKernel))
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

// syncSystemdBoot makes the ESP at esp match root's kernels: each bootable
// kernel's image, kpreload initramfs and entry (atomically, file by file), no
// kpreload entry for a kernel that is gone, and loader.conf's default on def.
func syncSystemdBoot(root, esp string, kernels []Kernel, def, cmdline string) error {
	if _, err := os.Stat(filepath.Join(esp, "loader")); err != nil {
		return fmt.Errorf("systemd-boot: %w (is the ESP mounted?)", err)
	}
	keep := map[string]bool{}
	for _, k := range kernels {
		if !k.Bootable() {
			continue
		}
		keep[EntryName(k.Release)] = true
		for src, dst := range map[string]string{KernelImagePath(k.Release): ESPKernelPath(k.Release), InitramfsPath(k.Release): ESPInitrdPath(k.Release)} {
			d := filepath.Join(esp, dst)
			if err := os.MkdirAll(filepath.Dir(d), 0o755); err != nil {
				return fmt.Errorf("systemd-boot: %w", err)
			}
			if err := fileutil.CopyAtomic(filepath.Join(root, src), d, 0o644, true); err != nil {
				return fmt.Errorf("systemd-boot: kernel %s: %w", k.Release, err)
			}
		}
		if err := os.MkdirAll(filepath.Join(esp, ESPEntriesDir), 0o755); err != nil {
			return fmt.Errorf("systemd-boot: %w", err)
		}
		if err := fileutil.WriteAtomic(filepath.Join(esp, EntryPath(k.Release)), []byte(LoaderEntry(k.Release, cmdline)), 0o644, true); err != nil {
			return fmt.Errorf("systemd-boot: entry of %s: %w", k.Release, err)
		}
	}
	// With no kernel left to boot with kpreload (def ""), loader.conf is
	// left as it is: systemd-boot falls back to the first entry there is.
	if def != "" {
		conf := filepath.Join(esp, ESPLoaderConf)
		text := LoaderConf(def)
		if b, err := os.ReadFile(conf); err == nil {
			text = withDefault(string(b), EntryName(def))
		}
		if err := fileutil.WriteAtomic(conf, []byte(text), 0o644, true); err != nil {
			return fmt.Errorf("systemd-boot: %w", err)
		}
	}
	// Only after the new default is in place: drop what a removed kernel
	// left, and what a killed run left half-written.
	for _, d := range []string{"loader", ESPEntriesDir} {
		removeStaleTemps(filepath.Join(esp, d))
	}
	for _, k := range kernels {
		removeStaleTemps(filepath.Join(esp, espKernelsDir, k.Release))
	}
	entries, _ := os.ReadDir(filepath.Join(esp, ESPEntriesDir))
	for _, e := range entries {
		n := e.Name()
		if !strings.HasPrefix(n, "kpreload-") || !strings.HasSuffix(n, ".conf") || keep[n] {
			continue
		}
		k := strings.TrimSuffix(strings.TrimPrefix(n, "kpreload-"), ".conf")
		if CheckRelease(k) != nil {
			continue
		}
		if err := os.Remove(filepath.Join(esp, ESPEntriesDir, n)); err != nil {
			return fmt.Errorf("systemd-boot: %w", err)
		}
		if err := os.RemoveAll(filepath.Join(esp, espKernelsDir, k)); err != nil {
			return fmt.Errorf("systemd-boot: %w", err)
		}
	}
	return nil
}

// entryCmdline is the command line of root's systemd-boot entries: given,
// else root's Cmdline file, else (root is the running system) /proc/cmdline
// without what the boot loader added.
func entryCmdline(root, given string) (string, error) {
	if s := strings.TrimSpace(given); s != "" {
		return s, nil
	}
	if b, err := os.ReadFile(filepath.Join(root, Cmdline)); err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	if filepath.Clean(root) == "/" {
		b, err := os.ReadFile("/proc/cmdline")
		if err != nil {
			return "", fmt.Errorf("kernel command line: %w", err)
		}
		var keep []string
		for _, f := range strings.Fields(string(b)) {
			if !strings.HasPrefix(f, "BOOT_IMAGE=") && !strings.HasPrefix(f, "initrd=") {
				keep = append(keep, f)
			}
		}
		return strings.Join(keep, " "), nil
	}
	return "", fmt.Errorf("no kernel command line for systemd-boot entries: write it to /%s in the root (root=UUID=... rw ...)", Cmdline)
}
