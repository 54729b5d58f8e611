package switcher

import (
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/kpreload/kpreload/live/loader"
	"golang.org/x/sys/unix"
)

// ldconfigPaths are where Ldconfig looks for the system's ldconfig, in order.
var ldconfigPaths = []string{"/sbin/ldconfig", "/usr/sbin/ldconfig"}

// NewSystem returns the running system switching the sets of the kernel
// release (its modules' vermagic checked, their digests verified), with
// sysRoot as its sysfs.
func NewSystem(release, sysRoot string) System {
	return System{Loader: &loader.Loader{Release: release, SysRoot: sysRoot, VerifyDigest: true, Phase: "switch", Now: BootTime}}
}

// Release returns the running kernel's release, as uname -r prints it.
func (System) Release() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}

// Ldconfig refreshes the system's linker cache, so the libraries behind a
// moved driver link are found by their new names (Options.Ldconfig); a
// system without ldconfig is left alone.
func (System) Ldconfig() error {
	return runLdconfig(ldconfigPaths)
}

// runLdconfig runs the first of paths that exists, its output in the error
// when it fails; none existing is no error.
func runLdconfig(paths []string) error {
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if out, err := exec.Command(p).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", p, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	return nil
}
