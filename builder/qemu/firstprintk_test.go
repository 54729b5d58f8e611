package qemu

import "testing"

// TestFirstPrintk: the first timestamped line with the text gives its time;
// an untimed line is passed over; no such line is not found.
func TestFirstPrintk(t *testing.T) {
	console := []byte("systemd[1]: untimed\n[    0.500000] Linux version\n[    2.250000] systemd[1]: start\r\n[    3.000000] systemd[1]: later\n")
	for _, c := range []struct {
		s    string
		want float64
		ok   bool
	}{
		{"systemd[1]:", 2.25, true},
		{"Linux version", 0.5, true},
		{"NVRM", 0, false},
	} {
		got, ok := FirstPrintk(console, c.s)
		if got != c.want || ok != c.ok {
			t.Errorf("FirstPrintk(%q) = %v, %v; want %v, %v", c.s, got, ok, c.want, c.ok)
		}
	}
}
