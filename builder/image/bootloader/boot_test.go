package bootloader

import "testing"

func TestCmdline(t *testing.T) {
	if got, want := Cmdline("u-u-i-d", " console=ttyS0 "), "root=UUID=u-u-i-d rw console=ttyS0"; got != want {
		t.Errorf("Cmdline = %q, want %q", got, want)
	}
	if got, want := Cmdline("x", ""), "root=UUID=x rw"; got != want {
		t.Errorf("Cmdline = %q, want %q", got, want)
	}
}

func TestCmdlineExtra(t *testing.T) {
	for _, tt := range []struct {
		secureBoot bool
		cmdline    string
		want       string
	}{
		{false, "console=ttyS0", "console=ttyS0"},
		{false, "", ""},
		{true, "console=ttyS0", "kpreload.secureboot=expected console=ttyS0"},
		{true, "", "kpreload.secureboot=expected"},
	} {
		if got := CmdlineExtra(tt.secureBoot, tt.cmdline); got != tt.want {
			t.Errorf("CmdlineExtra(%v, %q) = %q, want %q", tt.secureBoot, tt.cmdline, got, tt.want)
		}
	}
}
