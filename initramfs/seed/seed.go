// Package seed finds the cloud-init seeds a machine was given on a disk
// (NoCloud's CIDATA, OpenStack's config-2) and reads their user-data, so that
// /init can honour an instance request in it before userspace and without a
// network. It reads; the caller mounts (roots and the mount are values, so
// tests run on fixture trees).
package seed

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kpreload/kpreload/initramfs/rootfs"
	"github.com/kpreload/kpreload/internal/inroot"
)

// The kinds of seed, by the datasource cloud-init reads them as.
const (
	// NoCloud is a vfat or iso9660 filesystem labelled CIDATA (any case)
	// holding user-data and meta-data.
	NoCloud = "NoCloud"
	// ConfigDrive is OpenStack's config drive, labelled config-2 (any case),
	// holding openstack/latest/user_data.
	ConfigDrive = "ConfigDrive"
)

// Seed is a block device holding a seed.
type Seed struct {
	// Device is the device node, such as /dev/vdb.
	Device string
	// FSType is its filesystem (vfat or iso9660).
	FSType string
	// Label is its filesystem label.
	Label string
	// Kind is NoCloud or ConfigDrive.
	Kind string
}

// UserData is the user-data file's path inside the seed.
func (s Seed) UserData() string {
	if s.Kind == ConfigDrive {
		return "openstack/latest/user_data"
	}
	return "user-data"
}

// String names the seed for reports, such as "NoCloud seed /dev/vdb (CIDATA)".
func (s Seed) String() string {
	return fmt.Sprintf("%s seed %s (%s)", s.Kind, s.Device, s.Label)
}

// kindOf returns the seed kind a filesystem label names, or "".
func kindOf(label string) string {
	switch strings.ToLower(label) {
	case "cidata":
		return NoCloud
	case "config-2":
		return ConfigDrive
	}
	return ""
}

// Find returns the seeds among the block devices listed under
// sysRoot/class/block, whose nodes are under devRoot, in name order. Devices
// that cannot be read or hold another filesystem are skipped.
func Find(sysRoot, devRoot string) []Seed {
	names, _ := filepath.Glob(filepath.Join(sysRoot, "class/block/*"))
	sort.Strings(names)
	var seeds []Seed
	for _, n := range names {
		dev := filepath.Join(devRoot, filepath.Base(n))
		fstype, err := rootfs.FSType(dev)
		if err != nil || (fstype != "vfat" && fstype != "iso9660") {
			continue
		}
		label, err := rootfs.Label(dev)
		if err != nil {
			continue
		}
		if k := kindOf(label); k != "" {
			seeds = append(seeds, Seed{Device: dev, FSType: fstype, Label: label, Kind: k})
		}
	}
	return seeds
}

// Mounter mounts a seed read-only and unmounts it.
type Mounter interface {
	Mount(dev, dir, fstype string) error
	Unmount(dir string) error
}

// ErrNoUserData says the seed has no user-data file.
var ErrNoUserData = errors.New("no user-data")

// Read mounts s read-only at dir, reads at most max bytes of its user-data
// (more is an error) and unmounts it.
func Read(s Seed, dir string, m Mounter, max int64) (data []byte, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	if err := m.Mount(s.Device, dir, s.FSType); err != nil {
		return nil, fmt.Errorf("%s: mount: %w", s, err)
	}
	defer func() {
		if uerr := m.Unmount(dir); uerr != nil && err == nil {
			err = fmt.Errorf("%s: unmount: %w", s, uerr)
		}
	}()
	// Read inside the seed's mount: a link in it never leads out of the
	// seed (an absolute one is taken from the seed's top), and only a
	// regular file is opened, without blocking.
	data, err = inroot.ReadFile(dir, s.UserData(), max)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%s: %w (%s)", s, ErrNoUserData, s.UserData())
	case errors.Is(err, inroot.ErrTooLarge):
		return nil, fmt.Errorf("%s: %s is larger than %d bytes", s, s.UserData(), max)
	case err != nil:
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	return data, nil
}
