package efivar

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"
)

// write stores s as efivarfs shows a string variable of systemd-boot's:
// attributes, UTF-16LE, a NUL.
func write(t *testing.T, dir, name, s string) {
	t.Helper()
	b := []byte{7, 0, 0, 0}
	for _, c := range append(utf16.Encode([]rune(s)), 0) {
		b = binary.LittleEndian.AppendUint16(b, c)
	}
	if err := os.WriteFile(filepath.Join(dir, name+"-"+LoaderGUID), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoaderTimes(t *testing.T) {
	for _, c := range []struct {
		name             string
		init, exec       string
		firmware, loader float64
		ok               bool
		err              string
	}{
		{name: "systemd-boot", init: "1250000", exec: "1750000", firmware: 1.25, loader: 0.5, ok: true},
		{name: "no boot loader variables"},
		{name: "init only", init: "1250000"},
		{name: "not a number", init: "12x", exec: "13", err: "LoaderTimeInitUSec"},
		{name: "out of order", init: "2000000", exec: "1000000", err: "before it started"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if c.init != "" {
				write(t, dir, "LoaderTimeInitUSec", c.init)
			}
			if c.exec != "" {
				write(t, dir, "LoaderTimeExecUSec", c.exec)
			}
			fw, ld, ok, err := LoaderTimes(dir)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want one saying %q", err, c.err)
				}
				return
			}
			if err != nil || ok != c.ok || fw != c.firmware || ld != c.loader {
				t.Errorf("LoaderTimes = %v, %v, %v, %v; want %v, %v, %v, nil", fw, ld, ok, err, c.firmware, c.loader, c.ok)
			}
		})
	}
}

func TestString(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "LoaderBootCountPath", `\loader\entries\kpreload-6.1+3.conf`)
	if s, ok, err := String(dir, "LoaderBootCountPath"); err != nil || !ok || s != `\loader\entries\kpreload-6.1+3.conf` {
		t.Errorf("String = %q, %v, %v", s, ok, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Odd-"+LoaderGUID), []byte{1, 2, 3}, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := String(dir, "Odd"); err == nil || !strings.Contains(err.Error(), "3 bytes") {
		t.Errorf("a 3-byte variable: %v, want an error", err)
	}
}
