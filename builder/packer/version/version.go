// Package version holds the kpreload Packer plugin's version, reported to
// Packer by `packer-plugin-kpreload describe` and used when the plugin is
// installed under a versioned file name.
package version

import "github.com/hashicorp/packer-plugin-sdk/version"

var (
	// Version is the plugin's semantic version.
	Version = "0.1.0"
	// VersionPrerelease marks a development build ("dev") or a release ("").
	VersionPrerelease = "dev"
	// VersionMetadata is optional build metadata (such as a commit).
	VersionMetadata = ""
	// PluginVersion is the version the plugin set reports.
	PluginVersion = version.NewPluginVersion(Version, VersionPrerelease, VersionMetadata)
)
