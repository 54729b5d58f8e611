package archive

import (
	"context"
	"os"
	"strings"
	"testing"
)

// TestFetchKernelRefusesNonNames: a release shaped like one but not a name
// (kmodcache/names: "..", longer than 64 bytes) never reaches apt nor the
// file system.
func TestFetchKernelRefusesNonNames(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no apt-get, no dpkg
	cache := t.TempDir()
	a, err := New("", cache)
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"6.1..0-cloud-amd64", "6.1.0-56-cloud-" + strings.Repeat("a", 60)} {
		_, err := a.FetchKernel(context.Background(), rel, cache, nil)
		if err == nil || !strings.Contains(err.Error(), "not a kernel release") || !strings.Contains(err.Error(), "no \"..\"") {
			t.Errorf("FetchKernel(%q) error = %v, want not a kernel release, saying what is allowed", rel, err)
		}
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Errorf("refused names left %d entries in the cache", len(ents))
	}
}
