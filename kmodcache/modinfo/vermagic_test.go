package modinfo

import (
	"strings"
	"testing"
)

func TestVermagicRelease(t *testing.T) {
	for _, tt := range []struct{ vm, want string }{
		{"6.1.0-56-cloud-amd64 SMP mod_unload modversions ", "6.1.0-56-cloud-amd64"},
		{"  6.12.117+deb12-cloud-amd64", "6.12.117+deb12-cloud-amd64"},
		{"", ""},
		{" \t", ""},
	} {
		if got := VermagicRelease(tt.vm); got != tt.want {
			t.Errorf("VermagicRelease(%q) = %q, want %q", tt.vm, got, tt.want)
		}
	}
}

func TestCheckVermagic(t *testing.T) {
	const (
		kver61     = "6.1.0-56-cloud-amd64"
		kver612    = "6.12.117+deb12-cloud-amd64"
		vermagic61 = kver61 + " SMP preempt mod_unload modversions "
	)
	tests := []struct {
		vm, release, kernel string
		want                string // the refusal; "" means accepted
	}{
		{vermagic61, kver61, "", ""},
		{vermagic61, kver61, vermagic61, ""},
		{strings.TrimSpace(vermagic61), kver61, vermagic61 + "  ", ""}, // whitespace is not significant
		{kver612 + " SMP preempt mod_unload modversions ", kver61, "", "vermagic mismatch: built for kernel " + kver612 + ", running " + kver61},
		{kver612 + " SMP preempt mod_unload modversions ", kver61, vermagic61, "vermagic mismatch: built for kernel " + kver612 + ", running " + kver61},
		{kver61 + " SMP preempt mod_unload ", kver61, vermagic61, `vermagic mismatch: module "` + kver61 + ` SMP preempt mod_unload", kernel "` + strings.TrimSpace(vermagic61) + `"`}, // no modversions
		{kver61 + " SMP preempt mod_unload ", kver61, "", ""}, // release only when the full vermagic is unknown
		{"", kver61, vermagic61, "module has no vermagic"},
		{"   ", kver61, "", "module has no vermagic"},
	}
	for _, tt := range tests {
		if got := CheckVermagic(tt.vm, tt.release, tt.kernel); got != tt.want {
			t.Errorf("CheckVermagic(%q, %q, %q) = %q, want %q", tt.vm, tt.release, tt.kernel, got, tt.want)
		}
	}
}
