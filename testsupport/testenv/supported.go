package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	supportedOnce sync.Once
	supportedOut  []byte
	supportedErr  error
)

// SupportedGPUs returns the path of the real supported-gpus.json of the
// NVIDIA package pkg (name_version, as scripts/supported-gpus.sh names its
// directories) under CacheRoot, running that script once when it is missing
// (it fetches the lists of every shipped recipe, resolved by the Go recipe
// loader); the test fails with the script's output if that fails, or if the
// script ran and pkg is still missing (no shipped recipe names it). Under -short it
// skips the test (SkipShort): the lists are downloaded from Debian.
func SupportedGPUs(t testing.TB, pkg string) string {
	t.Helper()
	SkipShort(t, "needs NVIDIA's supported-gpus.json of "+pkg+" (scripts/supported-gpus.sh downloads it)")
	p := filepath.Join(CacheRoot(), "supported-gpus", pkg, "supported-gpus.json")
	if _, err := os.Stat(p); err != nil {
		supportedOnce.Do(func() {
			supportedOut, supportedErr = exec.Command(filepath.Join(RepoRoot(t), "scripts", "supported-gpus.sh")).CombinedOutput()
		})
		if supportedErr != nil {
			t.Fatalf("scripts/supported-gpus.sh: %v\n%s", supportedErr, supportedOut)
		}
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("scripts/supported-gpus.sh fetched no list of %s (no shipped recipe names that version?): %v\n%s", pkg, err, supportedOut)
		}
	}
	return p
}
