package install

import (
	"strings"
	"testing"
)

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

// TestGrubProbeNoise: update-grub's output is passed on whole, and the
// harmless grub-probe line of a loop-mounted image is noticed also when it
// arrives in pieces.
func TestGrubProbeNoise(t *testing.T) {
	for _, c := range []struct {
		name   string
		writes []string
		want   bool
	}{
		{"whole", []string{"Generating grub configuration file ...\n", "/usr/sbin/grub-probe: error: failed to get canonical path of `/tmp/x/image0.raw'.\n"}, true},
		{"split", []string{"grub-probe: error: failed to get can", "onical path of `/tmp/d.raw'.\n"}, true},
		{"clean", []string{"Generating grub configuration file ...\n", "done\n"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out strings.Builder
			g := &grubProbeNoise{w: &out}
			for _, w := range c.writes {
				if n, err := g.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if g.found != c.want || out.String() != strings.Join(c.writes, "") {
				t.Errorf("found %v, passed on %q; want %v and the output whole", g.found, out.String(), c.want)
			}
		})
	}
}
