package modname

import "testing"

func TestNormalize(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"nvidia-drm", "nvidia_drm"},
		{"virtio_pci", "virtio_pci"},
		{"a-b-c", "a_b_c"},
		{"", ""},
		{"-", "_"},
	} {
		if got := Normalize(tt.in); got != tt.want {
			t.Errorf("Normalize(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestSame(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want bool
	}{
		{"nvidia-drm", "nvidia_drm", true},
		{"nvidia_uvm", "nvidia_uvm", true},
		{"nvidia", "nvidia_drm", false},
		{"", "", true},
	} {
		if got := Same(tt.a, tt.b); got != tt.want {
			t.Errorf("Same(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestFromPath(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"kernel/drivers/block/virtio_blk.ko", "virtio_blk"},
		{"kernel/arch/x86/crypto/crc32-pclmul.ko.xz", "crc32_pclmul"},
		{"nvme-core", "nvme_core"},
		{"/abs/path/8250_pci.ko.zst", "8250_pci"},
		{"", ""},
	} {
		if got := FromPath(tt.in); got != tt.want {
			t.Errorf("FromPath(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
