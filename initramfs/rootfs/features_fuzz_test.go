package rootfs

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzFeatures checks the feature reader install runs on the superblock of
// the root it installs into: no panic; it identifies what fsType identifies,
// and its features are those the filesystem can have.
func FuzzFeatures(f *testing.F) {
	for _, s := range superblockSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fstype, features, err := Features(bytes.NewReader(data))
		want, werr := fsTypeFuzz(data)
		if werr != nil {
			if err == nil {
				t.Fatalf("Features = %q %q, nil where fsType fails (%v)", fstype, features, werr)
			}
			return
		}
		if err != nil {
			if fstype != "" || features != nil {
				t.Fatalf("Features = %q %q with error %v, want nothing", fstype, features, err)
			}
			return
		}
		if fstype != want {
			t.Fatalf("Features says %q, fsType %q", fstype, want)
		}
		for _, ft := range features {
			ok := false
			switch fstype {
			case "ext4":
				ok = ft == FeatureMetadataCsum || ft == FeatureEAInode
			case "xfs":
				ok = ft == FeatureXFSv5
			case "btrfs":
				ok = strings.HasPrefix(ft, FeatureBtrfsCsum) && len(features) == 1
			}
			if !ok {
				t.Fatalf("%s with feature %q", fstype, ft)
			}
		}
	})
}
