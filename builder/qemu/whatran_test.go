package qemu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConsoleSummary checks the fallback to the summary /init prints on the
// console when no report line came back.
func TestConsoleSummary(t *testing.T) {
	const sum = "kpreload: 3 devices, 2 modules loaded, 0 refused, 0 failed; drivers ready at 0.412s, root /dev/vda2 at 0.390s, switch_root at 0.455s"
	for _, tc := range []struct {
		name, console, want string
		ok                  bool
	}{
		{"summary among kernel lines", "[    0.1] Linux version 6.1\r\n" + sum + "\r\n[    1.0] systemd[1]: hi\r\n", sum, true},
		{"the last of two (a fallback boot)", strings.Replace(sum, "3 devices", "1 devices", 1) + "\n" + sum + "\n", sum, true},
		{"none", "[    0.1] Linux version 6.1\nkpreload: loading kpreload_edu\n", "", false},
	} {
		got, ok := ConsoleSummary([]byte(tc.console))
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: ConsoleSummary = %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// TestWhatRan checks what a boot without kpreload's /init is said to have run.
func TestWhatRan(t *testing.T) {
	const kernel = "[    0.000000] Linux version 6.1.0-56-cloud-amd64 (debian-kernel@lists.debian.org)\n"
	for _, tc := range []struct {
		name, console, want string
	}{
		{"no kernel", "BdsDxe: failed to load Boot0001\n", "no Linux kernel started"},
		{"Debian's initramfs", kernel + "[    0.9] Run /init as init process\nLoading, please wait...\nBegin: Loading essential drivers ... done.\n", "Debian's initramfs (initramfs-tools)"},
		{"dracut", kernel + "[    0.9] Run /init as init process\n[    1.0] dracut: dracut-059\n", "dracut's initramfs"},
		{"another initramfs", kernel + "[    0.9] Run /init as init process\n", "an initramfs that is not kpreload's"},
		{"no initramfs", kernel + "[    0.8] VFS: Mounted root (ext4 filesystem) readonly on device 254:2.\n[    0.9] Run /sbin/init as init process\n", "without an initramfs"},
		{"kpreload's /init stopped", kernel + "[    0.9] Run /init as init process\nkpreload: loading kpreload_edu\n", "kpreload's /init started but stopped"},
		{"panic before init", kernel + "[    0.9] Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)\n", "panicked before any init ran: Kernel panic - not syncing: VFS"},
		{"silence", kernel, "no init's output"},
	} {
		if got := WhatRan([]byte(tc.console)); !strings.Contains(got, tc.want) {
			t.Errorf("%s: WhatRan = %q, want it to say %q", tc.name, got, tc.want)
		}
	}
}

// TestNoReport checks a boot without a report line: the console summary is
// enough, else the error says what ran instead.
func TestNoReport(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) *Result {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return &Result{Console: p}
	}
	sum := "kpreload: 1 devices, 1 modules loaded, 0 refused, 0 failed; drivers ready at 1.000s, root /dev/vda2 at 0.900s, switch_root at 1.100s"
	if got, err := NoReport(write("ok.log", "[ 0.0] Linux version 6.1\n"+sum+"\n")); err != nil || got != sum {
		t.Errorf("NoReport(summary) = %q, %v; want the summary", got, err)
	}
	_, err := NoReport(write("debian.log", "[ 0.0] Linux version 6.1\n[ 0.9] Run /init as init process\nLoading, please wait...\n"))
	if err == nil || !strings.Contains(err.Error(), "kpreload's /init did not run: Debian's initramfs (initramfs-tools) ran instead") {
		t.Errorf("NoReport(Debian's initramfs) = %v", err)
	}
}
