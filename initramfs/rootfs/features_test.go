package rootfs

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestFeatures reads the features of filesystems made by the real mkfs tools
// (e2fsprogs, xfsprogs, btrfs-progs and dosfstools, installed by
// scripts/deps.sh) with their defaults and with the options that change them.
func TestFeatures(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name   string
		size   int64
		mkfs   []string
		fstype string
		want   []string
	}{
		{"ext4, mkfs.ext4's defaults", 16 << 20, []string{"mkfs.ext4", "-q", "-F"}, "ext4", []string{FeatureMetadataCsum}},
		{"ext4 without metadata_csum", 16 << 20, []string{"mkfs.ext4", "-q", "-F", "-O", "^metadata_csum"}, "ext4", nil},
		{"ext4 with ea_inode", 16 << 20, []string{"mkfs.ext4", "-q", "-F", "-O", "ea_inode"}, "ext4", []string{FeatureMetadataCsum, FeatureEAInode}},
		{"ext2", 16 << 20, []string{"mkfs.ext2", "-q", "-F"}, "ext4", nil},
		{"xfs, mkfs.xfs's defaults", 300 << 20, []string{"mkfs.xfs", "-q", "-f"}, "xfs", []string{FeatureXFSv5}},
		{"btrfs, mkfs.btrfs's defaults", 128 << 20, []string{"mkfs.btrfs", "-q", "-f"}, "btrfs", []string{FeatureBtrfsCsum + "crc32c"}},
		{"btrfs with xxhash", 128 << 20, []string{"mkfs.btrfs", "-q", "-f", "--csum", "xxhash"}, "btrfs", []string{FeatureBtrfsCsum + "xxhash64"}},
		{"btrfs with sha256", 128 << 20, []string{"mkfs.btrfs", "-q", "-f", "--csum", "sha256"}, "btrfs", []string{FeatureBtrfsCsum + "sha256"}},
		{"vfat", 16 << 20, []string{"mkfs.vfat"}, "vfat", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, filepath.Base(t.Name()))
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, c.size); err != nil {
				t.Fatal(err)
			}
			run(t, c.mkfs[0], append(c.mkfs[1:], p)...)
			fstype, got, err := ReadFeatures(p)
			if err != nil || fstype != c.fstype || !slices.Equal(got, c.want) {
				t.Errorf("ReadFeatures = %q, %q, %v; want %q, %q", fstype, got, err, c.fstype, c.want)
			}
		})
	}
	if _, _, err := Features(bytes.NewReader(make([]byte, 4096))); err == nil {
		t.Error("Features of zeros: no error, want an unknown filesystem")
	}
	if _, _, err := ReadFeatures(filepath.Join(dir, "missing")); err == nil {
		t.Error("ReadFeatures of a missing file: no error")
	}
}
