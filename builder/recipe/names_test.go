package recipe

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/names"
)

// TestRecipeNames: a recipe's driver name and version and its kernel
// releases are names (kmodcache/names): the error names the file, the line
// and the field, quotes the value and says what is allowed.
func TestRecipeNames(t *testing.T) {
	longVersion := "535." + strings.Repeat("1", 70)
	longRelease := "6.1.0-56-cloud-" + strings.Repeat("a", 60)
	tests := []struct {
		name, from, to string
		line           int
		field, msg     string
	}{
		{"version with dot dot", "  version: 535.261.03\n", "  version: 535..261\n", 4, "driver.version", `"535..261" holds ".."`},
		{"long version", "  version: 535.261.03\n", "  version: " + longVersion + "\n", 4, "driver.version", fmt.Sprintf("is %d bytes long", len(longVersion))},
		{"driver with dot dot", "  name: nvidia\n", "  name: nvidia..x\n", 3, "driver.name", `"nvidia..x" holds ".."`},
		{"release with dot dot", "[6.1.0-56-cloud-amd64]", "[6.12.1+deb12..1-cloud-amd64]", 10, "kernels.releases[0]", `kernel release "6.12.1+deb12..1-cloud-amd64" holds ".."`},
		{"long release", "[6.1.0-56-cloud-amd64]", "[" + longRelease + "]", 10, "kernels.releases[0]", fmt.Sprintf("is %d bytes long", len(longRelease))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := validHead + "kernels: {releases: [6.1.0-56-cloud-amd64]}\n"
			if !strings.Contains(text, tt.from) {
				t.Fatalf("the recipe lacks %q", tt.from)
			}
			p := writeRecipe(t, "bad.yaml", strings.Replace(text, tt.from, tt.to, 1))
			r, err := Load(p)
			if err == nil {
				t.Fatalf("Load accepted %s %+v", tt.field, r)
			}
			want := fmt.Sprintf("%s:%d: %s: ", p, tt.line, tt.field)
			if !hasLine(err.Error(), want, tt.msg) || !hasLine(err.Error(), want, names.Allowed) {
				t.Errorf("Load error =\n%s\nwant a line starting %q saying %s and %s", err, want, tt.msg, names.Allowed)
			}
		})
	}
}
