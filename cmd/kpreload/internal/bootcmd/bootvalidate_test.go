package bootcmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/qemu"
)

// TestBootValidate: the flags of kpreload boot checked together, and the
// configuration they make.
func TestBootValidate(t *testing.T) {
	dir := t.TempDir()
	disk := filepath.Join(dir, "d.qcow2")
	vars := filepath.Join(dir, "d.ovmf-vars.fd")
	for _, p := range []string{disk, vars} {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name        string
		m           bootCommand
		firmwareSet bool
		wantErr     string
		check       func(c qemu.Config) bool
	}{
		{name: "nothing", wantErr: "--kernel (or --image) is required"},
		{name: "kernel", m: bootCommand{c: qemu.Config{Kernel: "vmlinuz"}, fwCfg: []string{"a=b"}},
			check: func(c qemu.Config) bool { return c.FwCfg["a"] == "b" && c.Until == nil }},
		{name: "kernel, firmware", m: bootCommand{c: qemu.Config{Kernel: "vmlinuz"}}, firmwareSet: true, wantErr: "go with --image"},
		{name: "kernel, persist", m: bootCommand{c: qemu.Config{Kernel: "vmlinuz"}, persist: true}, wantErr: "go with --image"},
		{name: "bad fw-cfg", m: bootCommand{c: qemu.Config{Kernel: "vmlinuz"}, fwCfg: []string{"a"}}, wantErr: `--fw-cfg "a": want NAME=FILE`},
		{name: "bad until", m: bootCommand{c: qemu.Config{Kernel: "vmlinuz"}, until: "("}, wantErr: "--until:"},
		{name: "absent instance", m: bootCommand{c: qemu.Config{Kernel: "vmlinuz"}, instFile: filepath.Join(dir, "absent.yaml")}, wantErr: "--instance:"},
		{name: "image", m: bootCommand{image: disk, firmware: qemu.FirmwareUEFI},
			check: func(c qemu.Config) bool { return c.RootDisk == disk && c.Snapshot && c.UntilUp }},
		{name: "image, own until", m: bootCommand{image: disk, firmware: qemu.FirmwareBIOS, until: "login:"},
			check: func(c qemu.Config) bool { return c.Until.String() == "login:" && !c.UntilUp }},
		{name: "image, vars", m: bootCommand{image: disk, firmware: qemu.FirmwareUEFI, vars: vars},
			check: func(c qemu.Config) bool { return c.OVMFVars == vars && c.OVMFCode == qemu.OVMFCode4M }},
		{name: "image, absent vars", m: bootCommand{image: disk, firmware: qemu.FirmwareUEFI, vars: vars + ".absent"}, wantErr: "--vars:"},
		{name: "image, bios vars", m: bootCommand{image: disk, firmware: qemu.FirmwareBIOS, vars: vars}, wantErr: "--image: qemu: a UEFI variable store"},
		{name: "image, bad firmware", m: bootCommand{image: disk, firmware: "efi"}, wantErr: `firmware "efi"`},
		{name: "image and kernel", m: bootCommand{image: disk, c: qemu.Config{Kernel: "vmlinuz"}}, wantErr: "excludes --kernel"},
		{name: "absent image", m: bootCommand{image: disk + ".absent"}, wantErr: "--image: stat"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := tt.m
			err := m.validate(tt.firmwareSet)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("validate() = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("validate() = %v", err)
			}
			if !tt.check(m.c) {
				t.Errorf("validate() made %+v", m.c)
			}
		})
	}
}
