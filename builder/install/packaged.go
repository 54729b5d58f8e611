package install

import (
	"errors"
	"io/fs"

	"github.com/kpreload/kpreload/internal/inroot"
)

// Installed reports whether root boots kpreload: whether `kpreload install`
// (or the image builder or the Packer provisioner, which come through
// Install) has made it, which leaves InitramfsDir behind. The kernel hooks
// the kpreload package ships (PackagedHooks) hand over to `kpreload
// kernel-hook`, which does nothing on a root where this is false: installing
// the package changes no boot. A root where InitramfsDir cannot be looked
// for (/boot unreadable, or not a directory) counts as installed, so that
// the hook goes on and reports the problem.
func Installed(root string) bool {
	_, err := inroot.Stat(root, InitramfsDir)
	return !errors.Is(err, fs.ErrNotExist)
}

// PackagedKernelInstallPlugin is where the kpreload package ships the
// kernel-install plugin: packages' plugins live under /usr/lib, and a
// KernelInstallPlugin of the same name that Install writes in /etc
// overrides it, so it runs once either way.
const PackagedKernelInstallPlugin = "usr/lib/kernel/install.d/95-kpreload.install"

// PackagedHooks returns the hook files the kpreload package ships (path
// relative to the root, content, mode 0755): the same files Install writes
// (WriteHooks), with the kernel-install plugin at
// PackagedKernelInstallPlugin. They do nothing until Installed.
func PackagedHooks() map[string]string {
	return map[string]string{
		PostinstHook:                postinstText,
		PostrmHook:                  postrmText,
		GrubScript:                  GrubScriptText,
		PackagedKernelInstallPlugin: kernelInstallText,
	}
}
