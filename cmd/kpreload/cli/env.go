package cli

import (
	"os"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/builder/rootdisk"
	"github.com/kpreload/kpreload/kmodcache/remote"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// The environment variables kpreload reads, all here: the packages below
// cmd/ take them as options (internal/layers' test holds them to that).

// envDownloadDir is $KPRELOAD_CACHE, where downloads and unpacked kernels
// live ("" leaves the packages' default, /var/cache/kpreload).
func envDownloadDir() string { return os.Getenv("KPRELOAD_CACHE") }

// downloadDefaultDir is the download cache when a flag names none:
// $KPRELOAD_CACHE, else archive.DefaultCache().
func downloadDefaultDir() string {
	if d := envDownloadDir(); d != "" {
		return d
	}
	return archive.DefaultCache()
}

// cacheDefaultDir is the module cache when --cache names none:
// $KPRELOAD_CACHE_DIR, else store.DefaultDir.
func cacheDefaultDir() string {
	if d := os.Getenv("KPRELOAD_CACHE_DIR"); d != "" {
		return d
	}
	return store.DefaultDir
}

// envDockerConfig is the Docker config file when --docker-config names none:
// the standard place from $DOCKER_CONFIG and $HOME (remote.DockerConfigPath).
func envDockerConfig() string {
	return remote.DockerConfigPath(os.Getenv("DOCKER_CONFIG"), os.Getenv("HOME"))
}

// envStallBeforeManifest is $KPRELOAD_REMOTE_STALL_BEFORE_MANIFEST set:
// remote.Options.StallBeforeManifest, for the end-to-end tests.
func envStallBeforeManifest() bool {
	return os.Getenv("KPRELOAD_REMOTE_STALL_BEFORE_MANIFEST") != ""
}

// envHookStall is $KPRELOAD_HOOK_STALL: install.Options.StallAt, the step
// where the kernel hooks and install wait for a signal, for the tests of
// interrupted hooks.
func envHookStall() string { return os.Getenv("KPRELOAD_HOOK_STALL") }

// envSourceDir is $KPRELOAD_SRC (rootdisk.SourceEnv), kpreload's source tree
// for building the test root's init ("" searches from the working directory).
func envSourceDir() string { return os.Getenv(rootdisk.SourceEnv) }
