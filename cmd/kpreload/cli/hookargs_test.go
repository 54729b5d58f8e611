package cli

import (
	"strings"
	"testing"
)

// TestValidateHookArgs: each hook event's arguments.
func TestValidateHookArgs(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"grub-entries"}, ""},
		{[]string{"boot-ok"}, ""},
		{[]string{"up"}, ""},
		{[]string{"refresh"}, ""},
		{[]string{"boot-ok", "x"}, "boot-ok takes no arguments"},
		{[]string{"grub-entries", "x"}, "grub-entries takes no arguments"},
		{[]string{"postinst", "6.1.0-56-cloud-amd64"}, ""},
		{[]string{"postrm", "6.1.0-56-cloud-amd64", "/boot/vmlinuz-6.1.0-56-cloud-amd64"}, ""},
		{[]string{"postinst"}, "postinst needs the kernel release"},
		{[]string{"postrm", "../../etc"}, "../../etc"},
		{[]string{"preinst", "6.1.0-56-cloud-amd64"}, `unknown hook "preinst"`},
		{[]string{"preinst"}, "preinst needs the kernel release"},
	} {
		err := validateHookArgs(tt.args)
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("validateHookArgs(%q) = %v, want error %q", tt.args, err, tt.wantErr)
		}
	}
}
