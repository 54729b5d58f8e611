// Command packer-plugin-kpreload is the kpreload Packer plugin: the "kpreload"
// builder (a bootable golden image with drivers precompiled into a module
// cache, built offline) and the "kpreload" provisioner (installs the same
// cache, userspace and initramfs into an image another builder made).
//
// Packer starts it; put it in a directory named by PACKER_PLUGIN_PATH.
package main

import (
	"fmt"
	"os"

	"github.com/hashicorp/packer-plugin-sdk/plugin"

	"github.com/kpreload/kpreload/builder/packer/kpreloadbuilder"
	"github.com/kpreload/kpreload/builder/packer/provisioner"
	"github.com/kpreload/kpreload/builder/packer/version"
)

func main() {
	cloexecInherited()
	set := plugin.NewSet()
	set.RegisterBuilder(plugin.DEFAULT_NAME, new(kpreloadbuilder.Builder))
	set.RegisterProvisioner(plugin.DEFAULT_NAME, new(provisioner.Provisioner))
	set.SetVersion(version.PluginVersion)
	if err := set.Run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
