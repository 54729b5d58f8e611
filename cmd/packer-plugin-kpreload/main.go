// Command packer-plugin-kpreload is the kpreload Packer plugin: the "kpreload"
// builder (a bootable golden image with drivers precompiled into a module
// cache, built offline) and the "kpreload" provisioner (installs the same
// cache, userspace and initramfs into an image another builder made).
//
// Packer starts it once it is installed: `packer plugins install --path
// bin/packer-plugin-kpreload github.com/kpreload/kpreload` (docs/packer.md).
package main

import (
	"fmt"
	"os"

	"github.com/hashicorp/packer-plugin-sdk/plugin"

	"github.com/kpreload/kpreload/builder/packer-plugin-kpreload/kpreloadbuilder"
	"github.com/kpreload/kpreload/builder/packer-plugin-kpreload/provisioner"
	"github.com/kpreload/kpreload/builder/packer-plugin-kpreload/version"
	"github.com/kpreload/kpreload/kmodcache/remote"
)

func main() {
	cloexecInherited()
	// The environment is read here only; the builder and the provisioner
	// take it as their Env.
	env := kpreloadbuilder.Env{
		DownloadDir:  os.Getenv("KPRELOAD_CACHE"),
		CacheDir:     os.Getenv("KPRELOAD_CACHE_DIR"),
		DockerConfig: remote.DockerConfigPath(os.Getenv("DOCKER_CONFIG"), os.Getenv("HOME")),
	}
	set := plugin.NewSet()
	set.RegisterBuilder(plugin.DEFAULT_NAME, &kpreloadbuilder.Builder{Env: env})
	set.RegisterProvisioner(plugin.DEFAULT_NAME, &provisioner.Provisioner{Env: env})
	set.SetVersion(version.PluginVersion)
	if err := set.Run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
