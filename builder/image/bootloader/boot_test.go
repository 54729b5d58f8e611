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
