package pid1

import (
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/initramfs/seed"
)

// SeedMount is where the real /init mounts a cloud-init seed, read-only,
// while it reads its user-data (Options.SeedMount).
const SeedMount = "/run/kpreload/seed"

// seedFile is the instance request file of a cloud-init seed disk (NoCloud's
// CIDATA, OpenStack's config-2): the kpreload key of its #cloud-config
// user-data. Its devices are looked for now, among the block devices the
// root's mount found; the seed is mounted only when the sources before it
// (the command line, fw_cfg) carry no request. An absent seed is no source.
func (b *Boot) seedFile() instance.File {
	f := instance.File{Source: instance.SourceSeed, Path: "no cloud-init seed", UserData: true,
		Read: func() ([]byte, error) { return nil, fs.ErrNotExist }}
	// A valid request on the command line, or from fw_cfg's ports, comes
	// first (instance.Find): the block devices are not read for a seed then.
	if b.cmdlineRequest() {
		return f
	}
	if b.fwFile != nil && b.fwFile.Read != nil {
		if data, err := b.fwFile.Read(); err == nil {
			if _, perr := instance.Parse(b.fwFile.Path, data); perr == nil {
				return f // fw_cfg's valid request wins (a bad one falls through to the seed)
			}
		}
	}
	seeds := seed.Find(b.o.SysDir, b.o.DevDir)
	if len(seeds) == 0 {
		return f
	}
	s := seeds[0]
	if len(seeds) > 1 {
		b.warnf("%d cloud-init seeds (%v): reading %s", len(seeds), seeds, s)
	}
	f.Path = s.String() + " " + s.UserData()
	f.Read = func() ([]byte, error) {
		// The seed's filesystem (MODULE_ALIAS_FS fs-vfat, fs-iso9660) and,
		// for vfat, the code pages it asks the kernel for by request_module:
		// loaded here, they cost no helper (Modprobe) during the mount.
		names := b.index.Match("fs-" + s.FSType)
		if s.FSType == "vfat" {
			for _, n := range seedNLS {
				if len(b.index.ByName(n)) > 0 {
					names = append(names, n)
				}
			}
		}
		if len(names) > 0 {
			b.ld.Phase = "initramfs"
			b.load(names)
		}
		data, err := seed.Read(s, b.o.SeedMount, seedMounter{b.o.System}, instance.MaxUserData)
		if err == nil {
			b.event("%s: user-data read (%d bytes)", s, len(data))
		}
		return data, err
	}
	return f
}

// seedNLS are the code pages a vfat mount loads: the default codepage (437)
// and I/O character sets (ascii, utf8) of Debian's kernels.
var seedNLS = []string{"nls_cp437", "nls_ascii", "nls_utf8"}

// seedMounter mounts a seed read-only, without devices, setuid or exec.
type seedMounter struct{ sys System }

func (m seedMounter) Mount(dev, dir, fstype string) error {
	if err := m.sys.Mount(dev, dir, fstype, unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount %s (%s) on %s: %w", dev, fstype, dir, err)
	}
	return nil
}

func (m seedMounter) Unmount(dir string) error { return m.sys.Unmount(dir) }
