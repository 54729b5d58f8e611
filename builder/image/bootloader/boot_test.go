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

func TestOptionsExtra(t *testing.T) {
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
		if got := (Options{SecureBoot: tt.secureBoot, Cmdline: tt.cmdline}).Extra(); got != tt.want {
			t.Errorf("Options{SecureBoot: %v, Cmdline: %q}.Extra() = %q, want %q", tt.secureBoot, tt.cmdline, got, tt.want)
		}
	}
}
