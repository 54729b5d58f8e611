package instance

import (
	"strings"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/names"
)

// TestVersionIsAName: a driver version asked in an instance YAML, in
// user-data or on the kernel command line is a name (kmodcache/names): never
// a path, at most names.MaxLen characters; the error names the field and
// quotes the value, cut short.
func TestVersionIsAName(t *testing.T) {
	long := strings.Repeat("1.", 100) + "1"
	tests := []struct {
		name, version string
		want          string // "" when accepted
	}{
		{"a version", "535.261.03", ""},
		{"a branch", "535", ""},
		{"latest", "latest", ""},
		{"the longest", strings.Repeat("1.", 31) + "11", ""},
		{"up and out", "../x", `got "../x"`},
		{"dot dot", "..", `got ".."`},
		{"201 characters", long, `got "` + long[:names.MaxLen] + `"… (201 characters, at most 64)`},
		{"65 digits", strings.Repeat("5", 65), `(65 characters, at most 64)`},
	}
	sources := []struct {
		name  string
		parse func(v string) error
		field string
	}{
		{"instance YAML", func(v string) error {
			_, err := Parse("instance.yaml", []byte("resources:\n  driver:\n    version: \""+v+"\"\n"))
			return err
		}, "instance.yaml:3: resources.driver.version: "},
		{"user-data", func(v string) error {
			_, _, err := ParseUserData("user-data", []byte("#cloud-config\nkpreload:\n  resources:\n    driver:\n      version: \""+v+"\"\n"))
			return err
		}, "user-data:5: kpreload.resources.driver.version: "},
		{"kernel command line", func(v string) error {
			_, _, _, err := FromCmdline(func(name string) (string, bool) { return v, name == FlagDriver })
			return err
		}, "kernel command line " + FlagDriver + "="},
	}
	for _, src := range sources {
		for _, tt := range tests {
			t.Run(src.name+"/"+tt.name, func(t *testing.T) {
				err := src.parse(tt.version)
				if tt.want == "" {
					if err != nil {
						t.Fatalf("%q refused: %v", tt.version, err)
					}
					return
				}
				if err == nil {
					t.Fatalf("%.80q accepted", tt.version)
				}
				for _, want := range []string{src.field, `want a version ("535.261.03"), a branch ("535") or "latest"`, tt.want} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not say %s", err, want)
					}
				}
			})
		}
	}
}
