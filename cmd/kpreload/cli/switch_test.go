package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/bootindex"
)

// TestSwitchRefusesAbsentVersion runs the real command against a cache that lacks
// the version asked for: it must say what the cache has and touch nothing.
func TestSwitchRefusesAbsentVersion(t *testing.T) {
	cache := t.TempDir()
	if err := os.MkdirAll(filepath.Join(cache, "index"), 0o755); err != nil {
		t.Fatal(err)
	}
	ix := &bootindex.Index{Format: bootindex.FormatVersion, Kernel: "6.1.0-test", Sets: []bootindex.Set{
		{ID: "a", Driver: "kpreload-edu", Version: "1.0.0", Flavor: "open", Dir: "../objects/sha256"},
		{ID: "b", Driver: "kpreload-edu", Version: "2.0.0", Flavor: "open", Dir: "../objects/sha256"},
	}}
	if err := bootindex.Write(filepath.Join(cache, "index", "6.1.0-test.json"), ix); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := Execute([]string{"switch", "3.0.0", "--cache", cache, "--kernel", "6.1.0-test"}, &out, &errOut)
	want := "no cached driver set 3.0.0 for kernel 6.1.0-test; the cache has: kpreload-edu 1.0.0 (open), kpreload-edu 2.0.0 (open)"
	if code != 1 || !strings.Contains(errOut.String(), want) {
		t.Errorf("switch 3.0.0: exit %d, stderr %q; want 1 and %q", code, errOut.String(), want)
	}
	out.Reset()
	errOut.Reset()
	code = Execute([]string{"switch", "3.0.0", "--cache", cache, "--kernel", "6.1.0-test", "--json"}, &out, &errOut)
	var res map[string]any
	if err := json.Unmarshal(out.Bytes(), &res); code != 1 || err != nil {
		t.Errorf("switch --json: exit %d, stdout %q (%v); want 1 and a JSON record", code, out.String(), err)
	}
	code = Execute([]string{"switch"}, &out, &errOut)
	if code != 1 {
		t.Errorf("switch without VERSION: exit %d, want 1", code)
	}
}
