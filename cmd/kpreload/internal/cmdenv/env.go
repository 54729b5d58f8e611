// Package cmdenv is where kpreload's commands read the environment
// variables that configure kpreload ($KPRELOAD_*, $DOCKER_CONFIG, a
// Kubernetes Indexed Job's $JOB_COMPLETION_INDEX) and find their default
// places: the download cache, the module cache and /init. The packages below
// cmd/ take these as options (internal/layers' test holds them to that).
package cmdenv

import (
	"os"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/builder/rootdisk"
	"github.com/kpreload/kpreload/internal/layout"
	"github.com/kpreload/kpreload/kmodcache/remote"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// DownloadDir is $KPRELOAD_CACHE, where downloads and unpacked kernels
// live ("" leaves the packages' default, /var/cache/kpreload).
func DownloadDir() string { return os.Getenv("KPRELOAD_CACHE") }

// DownloadDefaultDir is the download cache when a flag names none:
// $KPRELOAD_CACHE, else archive.DefaultCache().
func DownloadDefaultDir() string {
	if d := DownloadDir(); d != "" {
		return d
	}
	return archive.DefaultCache()
}

// CacheDefaultDir is the module cache when --cache names none:
// $KPRELOAD_CACHE_DIR, else store.DefaultDir.
func CacheDefaultDir() string {
	if d := os.Getenv("KPRELOAD_CACHE_DIR"); d != "" {
		return d
	}
	return store.DefaultDir
}

// DockerConfig is the Docker config file when --docker-config names none:
// the standard place from $DOCKER_CONFIG and $HOME (remote.DockerConfigPath).
func DockerConfig() string {
	return remote.DockerConfigPath(os.Getenv("DOCKER_CONFIG"), os.Getenv("HOME"))
}

// StallBeforeManifest is $KPRELOAD_REMOTE_STALL_BEFORE_MANIFEST set:
// remote.Options.StallBeforeManifest, for the end-to-end tests.
func StallBeforeManifest() bool {
	return os.Getenv("KPRELOAD_REMOTE_STALL_BEFORE_MANIFEST") != ""
}

// HookStall is $KPRELOAD_HOOK_STALL: install.Options.StallAt, the step
// where the kernel hooks and install wait for a signal, for the tests of
// interrupted hooks.
func HookStall() string { return os.Getenv("KPRELOAD_HOOK_STALL") }

// SourceDir is $KPRELOAD_SRC (rootdisk.SourceEnv), kpreload's source tree
// for building the test root's init ("" searches from the working directory).
func SourceDir() string { return os.Getenv(rootdisk.SourceEnv) }

// DefaultInit finds the /init binary shipped with the kpreload executable:
// beside it (make build's bin/), else where the package installs it.
func DefaultInit() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return layout.Companion(exe, layout.Init)
}

// JobCompletionIndex is $JOB_COMPLETION_INDEX, the index a Kubernetes
// Indexed Job gives each pod, and whether it is set at all.
func JobCompletionIndex() (index string, set bool) { return os.LookupEnv("JOB_COMPLETION_INDEX") }
