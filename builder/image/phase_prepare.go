package image

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kpreload/kpreload/builder/image/bootloader"
	"github.com/kpreload/kpreload/builder/image/disk"
	"github.com/kpreload/kpreload/builder/image/stage"
	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/recipe"
)

// prepare checks what can fail before the slow phases (options, tools,
// kernels, the Secure Boot key) and makes the output, work and temporary
// output directories and the manifest's identifiers.
func (j *Job) prepare(ctx context.Context) error {
	o := j.o
	j.start = time.Now()
	if err := o.Validate(); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	for _, tool := range []string{"mmdebstrap", "sfdisk", "mkfs.vfat", "mmd", "mcopy", "mkfs.ext4", "qemu-img", "dpkg-deb", "systemctl", "tar"} {
		if _, err := j.tools().Runner.LookPath(tool); err != nil {
			return fmt.Errorf("image: %s is missing (install the image tools with scripts/deps.sh: mmdebstrap fdisk dosfstools mtools e2fsprogs qemu-utils): %w", tool, err)
		}
	}
	if err := checkPackages(o, archiveControls(ctx, o)); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	s := &j.o.Stage // the pinned and signing recipes replace the given ones
	recipes, err := stage.PinRecipes(ctx, s.Recipes, &recipe.AptArchives{Cache: s.DownloadDir}, o.Progress)
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	s.Recipes = recipes
	if _, err := os.Stat(bootloader.SystemdBootEFI); err != nil && o.Boot.Loader == install.SystemdBoot {
		return fmt.Errorf("image: systemd-boot is missing (install systemd-boot-efi with scripts/deps.sh): %w", err)
	}
	if o.Boot.SecureBoot {
		recipes, key, created, err := bootloader.AutoSign(s.Recipes, s.CacheDir)
		if err != nil {
			return fmt.Errorf("image: secure boot: %w", err)
		}
		if key != nil {
			verb := "using"
			if created {
				verb = "made"
			}
			o.Progress.say("secure boot: no recipe names a signing key: %s kpreload's module signing key %s (serial %s; kpreload keys show)", verb, key.Dir, key.SigKey())
			s.Recipes = recipes
		}
	}
	// Fail on unknown kernels and missing cells before the slow phases.
	if err := stage.CheckKernels(o.Kernels, s.Recipes, s.Lister, s.BuildMissing, o.Rootfs.Suite); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if o.Boot.SecureBoot {
		cert, path, unsigned, err := bootloader.ModuleCert(s.Recipes)
		if err != nil {
			return fmt.Errorf("image: secure boot: %w", err)
		}
		if len(unsigned) > 0 {
			o.Progress.say("secure boot: WARNING: recipes %s sign nothing: their modules will be refused at boot while Secure Boot is on", strings.Join(unsigned, ", "))
		}
		o.Progress.say("secure boot: module key %q (%s)", cert.Subject.CommonName, path)
		j.moduleKey = cert
	}

	if j.madeDirs, err = mkdirAll(o.OutDir); err != nil {
		return fmt.Errorf("image: output directory: %w", err)
	}
	if j.work, err = os.MkdirTemp(o.TempDir, "kpreload-image-"); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if j.outTmp, err = os.MkdirTemp(o.OutDir, ".tmp-"+o.Name+"-"); err != nil {
		return fmt.Errorf("image: output directory: %w", err)
	}
	j.m = &Manifest{
		Name: o.Name, Suite: o.Rootfs.Suite, Kernels: slices.Clone(o.Kernels), BuiltWith: o.BuiltWith, Bootloader: o.Boot.Loader,
		RootUUID: disk.NewUUID(), DiskGUID: disk.NewUUID(),
	}
	j.espVol = disk.NewVolumeID()
	j.m.ESPUUID = disk.FATUUID(j.espVol)
	j.m.Cmdline = bootloader.Cmdline(j.m.RootUUID, o.Boot.Extra())
	return nil
}

// cleanupPrepare removes the work and temporary output directories and, when
// the build failed, the output directory if prepare made it and it is empty.
func (j *Job) cleanupPrepare(failed bool) {
	for _, d := range []string{j.work, j.outTmp} {
		if d != "" {
			os.RemoveAll(d)
		}
	}
	if failed {
		for _, d := range j.madeDirs {
			os.Remove(d) // only when empty
		}
	}
}

// mkdirAll makes dir and its missing parents, returning those it made,
// deepest first.
func mkdirAll(dir string) ([]string, error) {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return missing, nil
}
