package switcher

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunLdconfig: the first ldconfig that exists runs, its failure comes
// back with its output, and a system without one is left alone.
func TestRunLdconfig(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mark := filepath.Join(dir, "ran")
	ok := script("ok", "echo ok > "+mark)
	fails := script("fails", "echo cache unwritable >&2; exit 1")
	absent := filepath.Join(dir, "absent")
	for _, tt := range []struct {
		name    string
		paths   []string
		wantErr string
		wantRan bool
	}{
		{"none", []string{absent}, "", false},
		{"the first existing one", []string{absent, ok, fails}, "", true},
		{"its failure", []string{fails, ok}, "fails: exit status 1: cache unwritable", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			os.Remove(mark)
			err := runLdconfig(tt.paths)
			if got := err != nil && strings.Contains(err.Error(), tt.wantErr); tt.wantErr != "" && !got || tt.wantErr == "" && err != nil {
				t.Errorf("runLdconfig(%q) = %v, want error %q", tt.paths, err, tt.wantErr)
			}
			_, statErr := os.Stat(mark)
			if got := statErr == nil; got != tt.wantRan {
				t.Errorf("runLdconfig(%q) ran the good one: %v, want %v", tt.paths, got, tt.wantRan)
			}
		})
	}
}

// TestSystemRelease: the release is the running kernel's, as
// /proc/sys/kernel/osrelease says.
func TestSystemRelease(t *testing.T) {
	want, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	got, err := System{}.Release()
	if err != nil || got != strings.TrimSpace(string(want)) {
		t.Errorf("Release() = %q, %v; want %q", got, err, strings.TrimSpace(string(want)))
	}
}

// TestNewSystem: the loader checks the given release's modules, digests
// verified, on the given sysfs.
func TestNewSystem(t *testing.T) {
	l := NewSystem("6.1.0-1-amd64", "/tmp/sys").Loader
	if l.Release != "6.1.0-1-amd64" || l.SysRoot != "/tmp/sys" || !l.VerifyDigest || l.Phase != "switch" || l.Now == nil {
		t.Errorf("NewSystem() loader = %+v, want release 6.1.0-1-amd64, sysfs /tmp/sys, digests verified, phase switch, a clock", l)
	}
}
