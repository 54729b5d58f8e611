package install

import (
	"errors"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/names"
)

// TestCheckReleaseIsAName: the kernel releases the boot loader files and
// hooks are named by follow kmodcache/names, the grammar the module cache,
// the boot index and /init's ready record use.
func TestCheckReleaseIsAName(t *testing.T) {
	tests := []struct {
		release string
		want    string // "" when accepted
	}{
		{"6.1.0-56-cloud-amd64", ""},
		{"6.12.38+deb13-cloud-amd64", ""},
		{".hidden", `kernel release ".hidden" starts with '.'`},
		{"6.1..0", `kernel release "6.1..0" holds ".."`},
		{"~6.1", `kernel release "~6.1" starts with '~'`},
		{strings.Repeat("6", 65), "is 65 bytes long"},
	}
	for _, tt := range tests {
		err := CheckRelease(tt.release)
		if tt.want == "" {
			if err != nil {
				t.Errorf("CheckRelease(%q) = %v, want nil", tt.release, err)
			}
			continue
		}
		if err == nil || !errors.Is(err, names.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("CheckRelease(%q) = %v, want an error saying %s", tt.release, err, tt.want)
		}
	}
}
