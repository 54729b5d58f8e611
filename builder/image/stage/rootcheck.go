package stage

import (
	"github.com/kpreload/kpreload/initramfs/rootcheck"
	"github.com/kpreload/kpreload/initramfs/rootfs"
)

// imageRoot is the root filesystem builder/image/disk.Write makes: ext4 as mkfs.ext4 makes
// it by default, with metadata_csum (TestImageRootIsWhatMkfsMakes holds the
// two together). Every kpreload initramfs Stage builds must mount it
// (rootcheck), before the boot loader is set up.
var imageRoot = rootcheck.Root{FSType: "ext4", Features: []string{rootfs.FeatureMetadataCsum}, Device: "the image's root partition (mkfs.ext4)"}
