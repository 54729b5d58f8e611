package install

import "testing"

// TestDescribeDefault: the reason install, status and grub.cfg give for
// the default agrees with the warnings before it: a default kernel without
// driver cells is never called "the newest kernel with its driver cells".
func TestDescribeDefault(t *testing.T) {
	with := Kernel{Release: "6.1.0-56-amd64", Image: true, Initramfs: true, Drivers: []string{"kpreload-edu 1.0.0"}}
	without := Kernel{Release: "6.1.0-57-amd64", Image: true, Initramfs: true}
	for _, c := range []struct {
		name    string
		policy  string
		kernels []Kernel
		want    string
	}{
		{"cells", "", []Kernel{without, with}, "the newest kernel with its driver cells"},
		{"no cells anywhere", "", []Kernel{without}, "the newest kernel: no kernel has its driver cells"},
		{"newest policy", Newest, []Kernel{without, with}, "the newest kernel (" + SettingsFile + ": default: newest)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := Settings{Default: c.policy}
			def := DefaultKernel(c.kernels, st.NewestFirst())
			if got := st.DescribeDefault(c.kernels, def); got != c.want {
				t.Errorf("DescribeDefault(%s) = %q, want %q", def, got, c.want)
			}
		})
	}
}
