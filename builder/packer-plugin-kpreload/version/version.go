// Package version holds the kpreload Packer plugin's version, reported to
// Packer by `packer-plugin-kpreload describe` and used when the plugin is
// installed under a versioned file name. It is kpreload's own version
// (internal/version): one source for the CLI, the plugin and image manifests.
package version

import (
	sdkversion "github.com/hashicorp/packer-plugin-sdk/version"

	"github.com/kpreload/kpreload/internal/version"
)

// PluginVersion is the version the plugin set reports: the release, no
// prerelease suffix, the commit as build metadata.
var PluginVersion = sdkversion.NewPluginVersion(version.Version(), "", "")
