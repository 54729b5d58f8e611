package qemu

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeOVMF writes a code image and a variable store template into dir.
func fakeOVMF(t *testing.T, dir string) (code, vars string) {
	t.Helper()
	code, vars = filepath.Join(dir, "CODE.fd"), filepath.Join(dir, "VARS.fd")
	for p, s := range map[string]string{code: "code", vars: "vars-template"} {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return code, vars
}

func TestArgsUEFI(t *testing.T) {
	c := Config{Firmware: FirmwareUEFI, RootDisk: "/img/ci.qcow2", OVMFCode: "/fw/CODE.fd", OVMFVars: "/run/VARS.fd", Devices: []string{"edu"}}
	args, err := Args(c, "/w/console.log", "/w/report.log")
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(args, " ")
	for _, want := range []string{
		"-drive if=pflash,format=raw,unit=0,readonly=on,file=/fw/CODE.fd",
		"-drive if=pflash,format=raw,unit=1,file=/run/VARS.fd",
		"-drive if=none,id=root,format=qcow2,file=/img/ci.qcow2 -device virtio-blk-pci,drive=root",
		"-device edu",
		"-serial file:/w/console.log -serial file:/w/report.log",
		"-fw_cfg name=opt/kpreload/report,string=/dev/ttyS1",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("args lack %q:\n%s", want, joined)
		}
	}
	for _, not := range []string{"-kernel", "-initrd", "-append"} {
		if slices.Contains(args, not) {
			t.Errorf("UEFI args hold %s:\n%s", not, joined)
		}
	}
	// The per-run copy Run makes replaces the template.
	c.varsCopy = "/w/OVMF_VARS.fd"
	args, _ = Args(c, "/w/console.log", "/w/report.log")
	if j := strings.Join(args, " "); !strings.Contains(j, "unit=1,file=/w/OVMF_VARS.fd") {
		t.Errorf("args do not use the per-run variable store:\n%s", j)
	}

	for _, bad := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"kernel", func(c *Config) { c.Kernel = "/vmlinuz" }, "leave Kernel and Initramfs empty"},
		{"append", func(c *Config) { c.Append = "quiet" }, "boot entry"},
		{"no disk", func(c *Config) { c.RootDisk = "" }, "RootDisk"},
		{"no code", func(c *Config) { c.OVMFCode = "" }, "OVMFCode"},
		{"no vars", func(c *Config) { c.OVMFVars = "" }, "OVMFVars"},
		{"firmware", func(c *Config) { c.Firmware = "coreboot" }, `firmware "coreboot"`},
	} {
		c := Config{Firmware: FirmwareUEFI, RootDisk: "/img/ci.qcow2", OVMFCode: "/fw/CODE.fd", OVMFVars: "/fw/VARS.fd"}
		bad.edit(&c)
		if _, err := Args(c, "/w/c", "/w/r"); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: err = %v, want it to mention %q", bad.name, err, bad.want)
		}
	}
}

// TestArgsBIOS checks a disk boot through SeaBIOS: no pflash, no -kernel,
// the root disk and extra read-only drives on virtio.
func TestArgsBIOS(t *testing.T) {
	c := Config{Firmware: FirmwareBIOS, RootDisk: "/img/grub.raw", Drives: []string{"/img/seed.raw", "/img/debs.qcow2"}}
	args, err := Args(c, "/w/console.log", "/w/report.log")
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(args, " ")
	for _, want := range []string{
		"-drive if=none,id=root,format=raw,file=/img/grub.raw -device virtio-blk-pci,drive=root",
		"-drive if=none,id=drive0,readonly=on,format=raw,file=/img/seed.raw -device virtio-blk-pci,drive=drive0",
		"-drive if=none,id=drive1,readonly=on,format=qcow2,file=/img/debs.qcow2 -device virtio-blk-pci,drive=drive1",
		"-fw_cfg name=opt/kpreload/report,string=/dev/ttyS1",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("args lack %q:\n%s", want, joined)
		}
	}
	for _, not := range []string{"-kernel", "-append", "pflash"} {
		if strings.Contains(joined, not) {
			t.Errorf("BIOS args hold %s:\n%s", not, joined)
		}
	}
	for _, bad := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"kernel", func(c *Config) { c.Kernel = "/vmlinuz" }, "leave Kernel and Initramfs empty"},
		{"no disk", func(c *Config) { c.RootDisk = "" }, "RootDisk"},
		{"the report channel's fw_cfg name", func(c *Config) { c.FwCfg = map[string]string{"kpreload/report": "/x"} }, "the harness's own"},
	} {
		c := c
		bad.edit(&c)
		if _, err := Args(c, "/w/c", "/w/r"); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: err = %v, want it to mention %q", bad.name, err, bad.want)
		}
	}
}

// TestRunUEFICopiesVars checks that each run boots with its own copy of the
// variable store template and leaves the template as it was.
func TestRunUEFICopiesVars(t *testing.T) {
	dir := t.TempDir()
	code, vars := fakeOVMF(t, t.TempDir())
	drv := &fakeDriver{console: bootConsole}
	res, err := (&Runner{Driver: drv, WorkDir: dir}).Run(context.Background(), Config{Firmware: FirmwareUEFI, RootDisk: "/img/x.raw", OVMFCode: code, OVMFVars: vars})
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(dir, "OVMF_VARS.fd")
	if j := strings.Join(res.Args, " "); !strings.Contains(j, "unit=1,file="+copyPath) || !strings.Contains(j, "unit=0,readonly=on,file="+code) {
		t.Errorf("args = %s, want the code image read-only and the copy %s", j, copyPath)
	}
	if b, err := os.ReadFile(copyPath); err != nil || string(b) != "vars-template" {
		t.Errorf("per-run copy = %q (err %v), want the template's bytes", b, err)
	}
	if res.Accel != "tcg" {
		t.Errorf("accel = %q, want tcg", res.Accel)
	}
}

func TestFindOVMF(t *testing.T) {
	code, vars := fakeOVMF(t, t.TempDir())
	if c, v, err := FindOVMF(code, vars); err != nil || c != code || v != vars {
		t.Errorf("FindOVMF(given) = %s, %s, %v", c, v, err)
	}
	if _, _, err := FindOVMF(code, ""); err == nil {
		t.Error("FindOVMF(unknown code, no vars) = nil error, want one asking for the template")
	}
	if _, _, err := FindOVMF(filepath.Join(t.TempDir(), "nope.fd"), vars); err == nil {
		t.Error("FindOVMF(missing code) = nil error")
	}
	// The installed firmware (package ovmf, scripts/deps.sh).
	c, v, err := FindOVMF("", "")
	if err != nil {
		t.Fatalf("installed OVMF: %v", err)
	}
	if !strings.HasSuffix(c, "OVMF_CODE_4M.fd") && !strings.HasSuffix(c, "OVMF_CODE.fd") || !strings.Contains(v, "OVMF_VARS") {
		t.Errorf("installed OVMF = %s, %s", c, v)
	}
}

func TestRunUntil(t *testing.T) {
	until := regexp.MustCompile(`Reached target .*Multi-User System`)
	// A guest that never powers off: the run ends when the console matches.
	console := "[    9.0] systemd[1]: Started x\r\n[  OK  ] Reached target \x1b[0;1;39mmulti-user.target\x1b[0m - Multi-User System.\r\n"
	drv := &fakeDriver{console: console, hang: true}
	start := time.Now()
	res, err := (&Runner{Driver: drv, WorkDir: t.TempDir()}).Run(context.Background(), Config{Kernel: "/k", Until: until, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !res.UntilMatched || !strings.Contains(res.UntilMatch, "Multi-User System") || res.TimedOut {
		t.Errorf("result: matched %v %q, timed out %v; want matched, not timed out", res.UntilMatched, res.UntilMatch, res.TimedOut)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("run took %s, want it stopped soon after the match", d)
	}

	// A machine that stops without the pattern is an error.
	drv = &fakeDriver{console: bootConsole}
	res, err = (&Runner{Driver: drv, WorkDir: t.TempDir()}).Run(context.Background(), Config{Kernel: "/k", Until: until})
	if err == nil || !strings.Contains(err.Error(), "before the console showed") || res.UntilMatched {
		t.Errorf("no match: err = %v, matched %v; want an error", err, res.UntilMatched)
	}

	// A hung guest that never matches still times out.
	drv = &fakeDriver{console: bootConsole, hang: true}
	res, err = (&Runner{Driver: drv, WorkDir: t.TempDir()}).Run(context.Background(), Config{Kernel: "/k", Until: until, Timeout: time.Second})
	if err == nil || !res.TimedOut {
		t.Errorf("hung without a match: err = %v, timed out %v; want a timeout", err, res.TimedOut)
	}
}
