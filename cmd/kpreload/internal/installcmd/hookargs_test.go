package installcmd

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

// TestKernelHookOnAPlainRoot: on a root kpreload never booted or
// installed, the hooks change nothing: up and boot-ok say why, postinst
// and grub-entries are quiet, refresh fails naming the missing boot
// loader.
func TestKernelHookOnAPlainRoot(t *testing.T) {
	root := t.TempDir()
	for _, tt := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"up"}, 0, "did not come through kpreload's /init", ""},
		{[]string{"boot-ok"}, 0, "did not come through kpreload's /init", ""},
		{[]string{"postinst", "6.1.0-56-cloud-amd64"}, 0, "", ""},
		{[]string{"postrm", "6.1.0-56-cloud-amd64"}, 0, "", ""},
		{[]string{"grub-entries"}, 0, "", ""},
		{[]string{"refresh"}, 1, "", "no boot loader found"},
	} {
		code, out, errOut := runCLI(append(append([]string{"kernel-hook"}, tt.args...), "--root", root)...)
		if code != tt.code || !strings.Contains(out, tt.stdout) || tt.stdout == "" && out != "" || !strings.Contains(errOut, tt.stderr) {
			t.Errorf("kernel-hook %q on a plain root = exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr with %q",
				tt.args, code, out, errOut, tt.code, tt.stdout, tt.stderr)
		}
	}
}
