package image

import (
	"errors"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/builder/image/rootfs"
)

// TestCheckPackages checks extra packages are refused from their control
// records before mmdebstrap runs: those the suite lacks and those that bring
// another initramfs generator, whatever their name.
func TestCheckPackages(t *testing.T) {
	records := map[string]archive.Control{
		"htop":            {Package: "htop"},
		"initramfs-tools": {Package: "initramfs-tools", Provides: []string{"linux-initramfs-tool"}, Conflicts: []string{"linux-initramfs-tool"}},
		"mkinitfoo":       {Package: "mkinitfoo", Provides: []string{"linux-initramfs-tool"}},
		"hater":           {Package: "hater", Conflicts: []string{"initramfs-tools"}},
	}
	controls := func(names ...string) (map[string]archive.Control, error) {
		got := map[string]archive.Control{}
		for _, n := range names {
			if c, ok := records[n]; ok {
				got[n] = c
			}
		}
		return got, nil
	}
	for _, tc := range []struct {
		name  string
		plain bool
		pkgs  []string
		want  string // "" for no error
	}{
		{"none", false, nil, ""},
		{"a plain package", false, []string{"htop=3.2.2-2"}, ""},
		{"not carried", false, []string{"htop", "no-such-pkg"}, "package no-such-pkg: Debian bookworm does not carry it"},
		{"another generator by its Provides", false, []string{"mkinitfoo"}, "package mkinitfoo: kpreload's images make their own initramfs"},
		{"plain: initramfs-tools itself", true, []string{"initramfs-tools"}, ""},
		{"plain: a package at odds with initramfs-tools", true, []string{"hater"}, "package hater: a plain image uses Debian's initramfs-tools"},
		{"plain: another generator", true, []string{"mkinitfoo"}, "package mkinitfoo: a plain image"},
	} {
		err := checkPackages(Options{Rootfs: rootfs.Options{Suite: "bookworm", Packages: tc.pkgs}, Plain: tc.plain}, controls)
		if got := errString(err); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: checkPackages = %q, want %q", tc.name, got, tc.want)
		}
	}
	failing := func(...string) (map[string]archive.Control, error) { return nil, errors.New("apt-cache: boom") }
	if err := checkPackages(Options{Rootfs: rootfs.Options{Packages: []string{"htop"}}}, failing); err == nil || !strings.Contains(err.Error(), "extra packages: apt-cache: boom") {
		t.Errorf("checkPackages with a failing archive = %v", err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
