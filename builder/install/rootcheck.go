package install

import (
	"fmt"

	"github.com/kpreload/kpreload/initramfs/rootcheck"
)

// rootFS returns the filesystem every kpreload initramfs built must mount:
// o.RootFS, else the one holding o.Root (rootcheck.Detect), read once. When
// it cannot be told (a root on tmpfs or overlay, as in a container build),
// kpreload install fails, saying how to name it, and a kernel hook (which
// must not fail a kernel package over what it cannot see) builds without
// the check and warns.
func (o *Options) rootFS() (*rootcheck.Root, error) {
	if o.RootFS != nil || o.rootUnknown {
		return o.RootFS, nil
	}
	r, err := rootcheck.Detect(o.Root)
	switch {
	case err == nil:
		o.RootFS = &r
		return o.RootFS, nil
	case o.hook:
		o.rootUnknown = true
		o.logf("WARNING: not checking that the kpreload initramfs can mount the root: %v", err)
		return nil, nil
	default:
		return nil, fmt.Errorf("%w: name the filesystem the root boots from (kpreload install --root-filesystem ext4)", err)
	}
}
