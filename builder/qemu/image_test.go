package qemu

import (
	"regexp"
	"strings"
	"testing"
)

// TestForImage: the firmware and OVMF choices of booting a disk image, and
// what the image's boot refuses.
func TestForImage(t *testing.T) {
	login := regexp.MustCompile("login:")
	for _, tt := range []struct {
		name     string
		c        Config
		firmware string
		vars     string
		persist  bool
		want     Config
		wantErr  string
	}{
		{name: "uefi", firmware: FirmwareUEFI,
			want: Config{Firmware: FirmwareUEFI, RootDisk: "d.qcow2", Snapshot: true, Until: ImageUp, UntilUp: true}},
		{name: "uefi with the image's vars", firmware: FirmwareUEFI, vars: "d.ovmf-vars.fd",
			want: Config{Firmware: FirmwareUEFI, RootDisk: "d.qcow2", Snapshot: true, Until: ImageUp, UntilUp: true, OVMFCode: OVMFCode4M, OVMFVars: "d.ovmf-vars.fd"}},
		{name: "uefi-secure", firmware: FirmwareUEFISecure,
			want: Config{Firmware: FirmwareUEFISecure, RootDisk: "d.qcow2", Snapshot: true, Until: ImageUp, UntilUp: true, OVMFVars: SecureBootVars}},
		{name: "uefi-secure with vars", firmware: FirmwareUEFISecure, vars: "v.fd",
			want: Config{Firmware: FirmwareUEFISecure, RootDisk: "d.qcow2", Snapshot: true, Until: ImageUp, UntilUp: true, OVMFVars: "v.fd"}},
		{name: "bios, persistent, own until", c: Config{Until: login}, firmware: FirmwareBIOS, persist: true,
			want: Config{Firmware: FirmwareBIOS, RootDisk: "d.qcow2", Until: login}},
		{name: "bios with vars", firmware: FirmwareBIOS, vars: "v.fd", wantErr: "goes with UEFI firmware"},
		{name: "unknown firmware", firmware: "coreboot", wantErr: `firmware "coreboot": want uefi, uefi-secure or bios`},
		{name: "direct", firmware: FirmwareDirect, wantErr: `firmware "": want`},
		{name: "kernel given", c: Config{Kernel: "vmlinuz"}, firmware: FirmwareUEFI, wantErr: "own bootloader"},
		{name: "append given", c: Config{Append: "quiet"}, firmware: FirmwareBIOS, wantErr: "own bootloader"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.c
			err := got.ForImage("d.qcow2", tt.firmware, tt.vars, tt.persist)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ForImage() = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ForImage() = %v", err)
			}
			if got.Firmware != tt.want.Firmware || got.RootDisk != tt.want.RootDisk || got.Snapshot != tt.want.Snapshot ||
				got.Until != tt.want.Until || got.UntilUp != tt.want.UntilUp || got.OVMFCode != tt.want.OVMFCode || got.OVMFVars != tt.want.OVMFVars {
				t.Errorf("ForImage() = firmware %q disk %q snapshot %v until %v up %v code %q vars %q,\nwant firmware %q disk %q snapshot %v until %v up %v code %q vars %q",
					got.Firmware, got.RootDisk, got.Snapshot, got.Until, got.UntilUp, got.OVMFCode, got.OVMFVars,
					tt.want.Firmware, tt.want.RootDisk, tt.want.Snapshot, tt.want.Until, tt.want.UntilUp, tt.want.OVMFCode, tt.want.OVMFVars)
			}
		})
	}
}
