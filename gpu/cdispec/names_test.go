package cdispec

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/gpu/activate"
	"github.com/kpreload/kpreload/kmodcache/names"
)

// TestGenerateRefusesReadyNames: a ready record whose version (or driver,
// flavour, kernel) is not a name is refused, naming the file, the field and
// the value, and no spec is made: a version of "../../../../etc" would mount
// the host's /etc into every container, ".." its /lib/firmware.
func TestGenerateRefusesReadyNames(t *testing.T) {
	tests := []struct {
		name, field, value string
	}{
		{"version up to etc", "version", "../../../../etc"},
		{"version dot dot", "version", ".."},
		{"version dot", "version", "."},
		{"version through a directory", "version", h200Version + "/../../../../etc"},
		{"version of 1 KiB", "version", strings.Repeat("5", 1024)},
		{"flavour dot dot", "flavor", ".."},
		{"kernel up to etc", "kernel", "../../etc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			drv := "opt/kpreload/drivers/" + h200Version + "/"
			root := h200Tree(t, map[string]string{
				drv + "usr/lib/x86_64-linux-gnu/libcuda.so." + h200Version: "elf",
				"lib/firmware/nvidia/" + h200Version + "/gsp_ga10x.bin":    "fw",
				"lib/firmware/regulatory.db":                               "all the firmware",
				"etc/shadow":                                               "root:secret",
			})
			run := filepath.Join(root, activate.RunDir)
			if err := activate.Point(run, root, activate.DriversDir, h200Version); err != nil {
				t.Fatal(err)
			}
			fields := map[string]string{"driver": "nvidia", "version": h200Version, "flavor": "open", "kernel": "6.1.0-56-cloud-amd64"}
			fields[tt.field] = tt.value
			write(t, activate.ReadyPath(run), `{"format":1,"driver":"`+fields["driver"]+`","version":"`+fields["version"]+
				`","flavor":"`+fields["flavor"]+`","kernel":"`+fields["kernel"]+`","modules":[],"by":"init"}`)

			spec, found, err := Generate(root, Options{})
			if err == nil {
				b, _ := Marshal(spec, false)
				t.Fatalf("Generate accepted %s %.80q; firmware %q, spec:\n%s", tt.field, tt.value, found.Firmware, b)
			}
			if !errors.Is(err, names.ErrInvalid) {
				t.Errorf("error %q does not wrap names.ErrInvalid", err)
			}
			shown := tt.value
			if len(shown) > 64 {
				shown = shown[:64]
			}
			for _, want := range []string{activate.ReadyPath(run), tt.field + ` "` + shown, names.Allowed} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %s", err, want)
				}
			}
			if spec != nil || found != nil {
				t.Errorf("Generate returned a spec (%v) or a finding (%+v) with its error", spec, found)
			}
		})
	}
}

// TestFirmwareDirRefusesNames: the firmware directory is looked up only for
// a version that is a name, whoever calls it.
func TestFirmwareDirRefusesNames(t *testing.T) {
	root := h200Tree(t, map[string]string{
		"lib/firmware/nvidia/" + h200Version + "/gsp_ga10x.bin": "fw",
		"etc/shadow": "root:secret",
	})
	tests := []struct{ version, want string }{
		{h200Version, "/lib/firmware/nvidia/" + h200Version},
		{"..", ""},
		{".", ""},
		{"../../../../etc", ""},
		{"", ""},
	}
	for _, tt := range tests {
		if got := firmwareDir(root, tt.version, ""); got != tt.want {
			t.Errorf("firmwareDir(%q) = %q, want %q", tt.version, got, tt.want)
		}
	}
}
