// Package pcitest builds sysfs trees of PCI devices for tests: from a fixture
// captured on a real machine (one "<address> <file> <contents>" line per sysfs
// file, as testdata/h200-gpu-vm/pci-sysfs.txt at the repository's root) or from
// a list of devices.
package pcitest

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/gpu/pci"
)

// H200 returns the directory of the real H200 VM's captures (see its README.md),
// testdata/h200-gpu-vm under the repository's root: the first directory holding
// go.mod found walking up from the working directory (a test's package
// directory).
func H200(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			fixture := filepath.Join(dir, "testdata", "h200-gpu-vm")
			if _, err := os.Stat(fixture); err != nil {
				t.Fatalf("H200 VM fixture: %v", err)
			}
			return fixture
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("H200 VM fixture: no go.mod in %s or above it", wd)
		}
		dir = parent
	}
}

// FromFixture writes the fixture's files under a new temporary root as
// root/sys/bus/pci/devices/<address>/<file> ("driver" lines become the driver
// symlink sysfs has) and returns root.
func FromFixture(t testing.TB, fixture string) string {
	t.Helper()
	root := t.TempDir()
	if err := WriteFixture(root, fixture); err != nil {
		t.Fatal(err)
	}
	return root
}

// WriteFixture is FromFixture's work, into an existing root.
func WriteFixture(root, fixture string) error {
	f, err := os.Open(fixture)
	if err != nil {
		return fmt.Errorf("pci fixture: %w", err)
	}
	defer f.Close()
	devices := filepath.Join(root, "sys", "bus", "pci", "devices")
	sc := bufio.NewScanner(f)
	n := 0
	for line := 1; sc.Scan(); line++ {
		fields := strings.SplitN(strings.TrimSpace(sc.Text()), " ", 3)
		if len(fields) == 1 && fields[0] == "" {
			continue
		}
		if len(fields) != 3 || strings.Contains(fields[0], "/") || strings.Contains(fields[1], "/") {
			return fmt.Errorf("pci fixture %s:%d: want \"<address> <file> <contents>\", got %q", fixture, line, sc.Text())
		}
		dir := filepath.Join(devices, fields[0])
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if fields[1] == "driver" {
			drv := filepath.Join(root, "sys", "bus", "pci", "drivers", fields[2])
			if err := os.MkdirAll(drv, 0o755); err != nil {
				return err
			}
			if err := os.Symlink(drv, filepath.Join(dir, "driver")); err != nil {
				return err
			}
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, fields[1]), []byte(fields[2]+"\n"), 0o644); err != nil {
			return err
		}
		n++
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("pci fixture %s: %w", fixture, err)
	}
	if n == 0 {
		return fmt.Errorf("pci fixture %s: no device files", fixture)
	}
	return nil
}

// FromDevices builds a sysfs tree holding devs and returns its root.
func FromDevices(t testing.TB, devs ...pci.Device) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range devs {
		dir := filepath.Join(root, "sys", "bus", "pci", "devices", d.Address)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, v := range map[string]string{
			"vendor":           fmt.Sprintf("0x%04x", d.Vendor),
			"device":           fmt.Sprintf("0x%04x", d.Device),
			"subsystem_vendor": fmt.Sprintf("0x%04x", d.SubVendor),
			"subsystem_device": fmt.Sprintf("0x%04x", d.SubDevice),
			"class":            fmt.Sprintf("0x%06x", d.Class),
		} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if d.Driver != "" {
			if err := os.Symlink("../../../bus/pci/drivers/"+d.Driver, filepath.Join(dir, "driver")); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}
