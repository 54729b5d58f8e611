package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kpreload/kpreload/builder/install"
)

// build implements Build.
func build(ctx context.Context, o Options) (*Manifest, error) {
	start := time.Now()
	o = o.withDefaults()
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	for _, tool := range []string{"mmdebstrap", "sfdisk", "mkfs.vfat", "mmd", "mcopy", "mkfs.ext4", "qemu-img", "dpkg-deb", "systemctl", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("image: %s is missing (install the image tools with scripts/deps.sh: mmdebstrap fdisk dosfstools mtools e2fsprogs qemu-utils): %w", tool, err)
		}
	}
	if _, err := os.Stat(SystemdBootEFI); err != nil && o.Bootloader == install.SystemdBoot {
		return nil, fmt.Errorf("image: systemd-boot is missing (install systemd-boot-efi with scripts/deps.sh): %w", err)
	}
	// Fail on unknown kernels and missing cells before the slow steps.
	if err := CheckKernels(o.Kernels, o.Recipes, o.Lister, o.BuildMissing, o.Suite); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	var moduleKey *x509.Certificate
	if o.SecureBoot {
		cert, path, unsigned, err := moduleCert(o.Recipes)
		if err != nil {
			return nil, fmt.Errorf("image: secure boot: %w", err)
		}
		if len(unsigned) > 0 {
			o.Progress.say("secure boot: WARNING: recipes %s sign nothing: their modules will be refused at boot while Secure Boot is on", strings.Join(unsigned, ", "))
		}
		o.Progress.say("secure boot: module key %q (%s)", cert.Subject.CommonName, path)
		moduleKey = cert
	}
	// With BuildMissing the missing cells are built here; Stage then finds them all.
	if _, err := resolveCells(ctx, o.CacheDir, o.DownloadDir, o.Recipes, o.Kernels, o.BuildMissing, o.Remote, o.Lister, o.Progress); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}

	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("image: output directory: %w", err)
	}
	work, err := os.MkdirTemp(o.TempDir, "kpreload-image-")
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	defer os.RemoveAll(work)
	outTmp, err := os.MkdirTemp(o.OutDir, ".tmp-"+o.Name+"-")
	if err != nil {
		return nil, fmt.Errorf("image: output directory: %w", err)
	}
	defer os.RemoveAll(outTmp)

	m := &Manifest{
		Name: o.Name, Suite: o.Suite, Kernels: slices.Clone(o.Kernels), BuiltWith: o.BuiltWith, Bootloader: o.Bootloader,
		RootUUID: newUUID(), DiskGUID: newUUID(),
	}
	espVol := newVolumeID()
	m.ESPUUID = fatUUID(espVol)
	m.Cmdline = ImageCmdlineFor(m.RootUUID, o.Cmdline)

	// 1. Root filesystem.
	spec := rootfsSpec(o, time.Now().UTC().Format("2006-01-02"))
	tarball, info, err := rootfsTarball(ctx, spec, o.RootfsCacheDir, work, o.Progress)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	m.Rootfs = info
	root := filepath.Join(work, "root")
	o.Progress.say("rootfs: unpacking")
	if err := extractTarball(ctx, tarball, root); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	if m.KernelPackages, err = kernelPackages(ctx, root, o.Kernels); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}

	// 2. Everything kpreload-specific (nothing in a plain image).
	if !o.Plain {
		res, err := Stage(ctx, StageOptions{
			Kernels: o.Kernels, Recipes: o.Recipes, CacheDir: o.CacheDir, DownloadDir: o.DownloadDir,
			Lister: o.Lister, KpreloadBinary: o.KpreloadBinary, InitBinary: o.InitBinary,
			Instance: o.Instance, Cmdline: m.Cmdline, Progress: o.Progress, EarlyDrivers: o.EarlyDrivers,
			RemoteConfig: o.RemoteConfig,
			// BuildMissing already ran above; Stage finds the cells in the cache.
		}, root)
		if err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
		m.Drivers, m.Userspace, m.Firmware, m.Initramfs = res.Drivers, res.Userspace, res.Firmware, res.Initramfs
	}
	if m.Drivers == nil {
		m.Drivers = []Driver{}
	}
	if o.SecureBoot {
		for _, k := range o.Kernels {
			if err := checkSignedKernel(filepath.Join(root, install.KernelImagePath(k))); err != nil {
				return nil, fmt.Errorf("image: secure boot: %w", err)
			}
		}
	}
	if err := addFiles(root, o.Files); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	if err := configureRoot(ctx, root, m.RootUUID, m.ESPUUID, o.EmptyRootPassword, !o.Plain); err != nil {
		return nil, fmt.Errorf("image: configure root: %w", err)
	}
	if err := resetIdentity(ctx, root); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	if o.CloudInit {
		if err := configureCloudInit(root); err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
	}
	if len(o.Enable) > 0 {
		o.Progress.say("rootfs: enabling %s", strings.Join(o.Enable, ", "))
		if err := run(ctx, nil, "systemctl", append([]string{"--root=" + root, "enable"}, o.Enable...)...); err != nil {
			return nil, fmt.Errorf("image: enable %s: %w", strings.Join(o.Enable, " "), err)
		}
	}

	// 3. The boot loader: its files on the ESP (and, for GRUB, core.img for
	// the BIOS boot partition), made through builder/install as the kernel
	// hooks do on the running image.
	espDir := filepath.Join(work, "esp")
	if err := os.MkdirAll(espDir, 0o755); err != nil {
		return nil, err
	}
	var esp []espFile
	coreImg := ""
	if o.Bootloader == install.GRUB {
		esp, coreImg, err = grubFiles(ctx, work, root, m.RootUUID, o.Cmdline, !o.Plain)
		if err == nil && moduleKey != nil {
			m.SecureBoot = true
			m.ModuleKey, err = secureBootFiles(ctx, root, outTmp, o.OutDir, o.Name, moduleKey)
		}
	} else {
		esp, err = espFiles(ctx, espDir, root, o.Kernels, m.Cmdline)
	}
	if err != nil {
		return nil, fmt.Errorf("image: %s: %w", o.Bootloader, err)
	}

	// 4. The disk.
	layout, err := NewLayout(o.SizeMB, o.ESPSizeMB, m.DiskGUID, newUUID(), newUUID())
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	if o.Bootloader == install.GRUB {
		layout = layout.WithBIOSBoot(newUUID())
	}
	raw := filepath.Join(outTmp, o.Name+"."+FormatRaw)
	o.Progress.say("disk: %d MiB GPT (ESP %d MiB, root ext4), mkfs.ext4 -d", o.SizeMB, o.ESPSizeMB)
	if err := writeDisk(ctx, raw, layout, espVol, esp, root, m.RootUUID); err != nil {
		return nil, fmt.Errorf("image: disk: %w", err)
	}
	if coreImg != "" {
		o.Progress.say("disk: GRUB's boot.img in the MBR, core.img in the BIOS boot partition")
		if err := biosSetup(raw, layout, filepath.Join(root, "usr/lib/grub/i386-pc/boot.img"), coreImg); err != nil {
			return nil, fmt.Errorf("image: disk: %w", err)
		}
	}
	// The formats (formats.go), each made from the raw disk.
	m.BootFirmware = bootFirmware(o.Bootloader)
	var outputs []string // temporary paths, in Files order
	for _, f := range o.Formats {
		p, virtual, err := writeFormat(ctx, raw, f, outTmp, o.Name, o.Progress)
		if err != nil {
			return nil, fmt.Errorf("image: disk: %w", err)
		}
		o.Progress.say("disk: sha256 of %s", filepath.Base(p))
		size, sum, err := digest(p)
		if err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
		m.Files = append(m.Files, File{Path: OutputPath(o.OutDir, o.Name, f), Format: f, Size: size, SHA256: sum, VirtualSize: virtual})
		outputs = append(outputs, p)
	}
	m.Created = time.Now().UTC().Format(time.RFC3339)
	m.Seconds = time.Since(start).Seconds()
	mj, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	manifestTmp := filepath.Join(outTmp, o.Name+".manifest.json")
	if err := os.WriteFile(manifestTmp, append(mj, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	// Every output is complete: move them into place, the manifest last.
	for i, f := range m.Files {
		if err := os.Rename(outputs[i], f.Path); err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
	}
	if k := m.ModuleKey; k != nil {
		for _, p := range k.files() {
			if err := os.Rename(filepath.Join(outTmp, filepath.Base(p)), p); err != nil {
				return nil, fmt.Errorf("image: %w", err)
			}
		}
	}
	if err := os.Rename(manifestTmp, OutputPath(o.OutDir, o.Name, "manifest.json")); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	o.Progress.say("image %s done in %.0fs", o.Name, time.Since(start).Seconds())
	return m, nil
}

// espFiles lays out the ESP in dir through builder/install (the same door the
// kernel hooks use on the running image: loader.conf, one entry, image and
// kpreload initramfs per kernel, the first kernel the default) and returns
// every file to copy onto the ESP, systemd-boot's binaries included.
func espFiles(ctx context.Context, dir, root string, kernels []string, cmdline string) ([]espFile, error) {
	for _, k := range kernels {
		if _, err := os.Stat(filepath.Join(root, install.KernelImagePath(k))); err != nil {
			return nil, fmt.Errorf("kernel %s: %w (did linux-image-%s install?)", k, err, k)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, install.ESPEntriesDir), 0o755); err != nil {
		return nil, err
	}
	if _, err := install.Install(ctx, install.Options{
		Root: root, ESP: dir, Bootloader: install.SystemdBoot, Kernels: kernels,
		Default: kernels[0], Cmdline: cmdline, SkipInitramfs: true,
	}); err != nil {
		return nil, err
	}
	files := []espFile{
		{SystemdBootEFI, install.ESPBootloader},
		{SystemdBootEFI, install.ESPSystemdBoot},
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		files = append(files, espFile{p, filepath.ToSlash(rel)})
		return err
	})
	return files, err
}

// grubFiles sets up GRUB in root: /etc/default/grub, GRUB's images and
// modules, and grub.cfg through builder/install (whose /etc/grub.d script
// puts kpreload's entries first); it returns the ESP's files (GRUB's UEFI
// image as the removable-media loader) and core.img for the BIOS boot
// partition.
func grubFiles(ctx context.Context, work, root, rootUUID, cmdline string, kpreload bool) ([]espFile, string, error) {
	if err := writeFile(filepath.Join(root, "etc/default/grub"), []byte(defaultGrub(cmdline)), 0o644); err != nil {
		return nil, "", err
	}
	core, err := grubImages(ctx, root, rootUUID, work)
	if err != nil {
		return nil, "", err
	}
	update := buildRootUpdateGrub(rootUUID)
	if !kpreload {
		// A plain image: GRUB's own entries, the distribution's initramfs.
		err = update(ctx, root, io.Discard)
	} else {
		_, err = install.Install(ctx, install.Options{Root: root, Bootloader: install.GRUB, SkipInitramfs: true, UpdateGrub: update})
	}
	if err != nil {
		return nil, "", err
	}
	esp, err := shimESP(root, work, rootUUID)
	return esp, core, err
}

// kernelPackages returns the installed version of each kernel's linux-image
// package in root's dpkg database.
func kernelPackages(ctx context.Context, root string, kernels []string) (map[string]string, error) {
	out := map[string]string{}
	for _, k := range kernels {
		cmd := exec.CommandContext(ctx, "dpkg-query", "--admindir="+filepath.Join(root, "var/lib/dpkg"), "-W", "-f=${Version}", "linux-image-"+k)
		b, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("kernel %s is not installed in the root filesystem: %w", k, err)
		}
		out[k] = strings.TrimSpace(string(b))
	}
	return out, nil
}

// digest returns a file's size and SHA-256.
func digest(path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", fmt.Errorf("digest %s: %w", path, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// ReadManifest reads a manifest Build wrote.
func ReadManifest(path string) (*Manifest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("image manifest %s: %w", path, err)
	}
	return &m, nil
}

// addFiles copies extra files into the root (Options.Files), keeping modes.
func addFiles(root string, files map[string]string) error {
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
