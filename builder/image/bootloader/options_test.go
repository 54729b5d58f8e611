package bootloader

import (
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/install"
)

func TestOptionsProblems(t *testing.T) {
	for _, tt := range []struct {
		name string
		o    Options
		want []string // in the problems, in order; none for a good one
	}{
		{"systemd-boot", Options{Loader: install.SystemdBoot, Cmdline: "console=ttyS0"}, nil},
		{"grub with secure boot", Options{Loader: install.GRUB, SecureBoot: true}, nil},
		{"no loader", Options{}, []string{`bootloader ""`}},
		{"secure boot with systemd-boot", Options{Loader: install.SystemdBoot, SecureBoot: true}, []string{"secure boot needs the grub bootloader"}},
		{"two lines and a root", Options{Loader: install.GRUB, Cmdline: "a\nroot=/dev/sda1"}, []string{"must be one line", `cmdline "root=/dev/sda1"`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.o.Problems()
			if len(got) != len(tt.want) {
				t.Fatalf("Problems() = %v, want %d problems: %q", got, len(tt.want), tt.want)
			}
			for i, want := range tt.want {
				if !strings.Contains(got[i].Error(), want) {
					t.Errorf("problem %d = %v, want it to say %q", i, got[i], want)
				}
			}
		})
	}
}
