package seed

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// findFuzz and readFuzz are the calls the fuzz targets make (local wrappers,
// so that a change of their signatures is one line here).
func findFuzz(sys, dev string) []Seed { return Find(sys, dev) }

func readFuzz(s Seed, dir string, m Mounter, max int64) ([]byte, error) { return Read(s, dir, m, max) }

// fatImage is the start of a FAT12 filesystem as mkfs.vfat writes it, labelled lbl.
func fatImage(lbl string) []byte {
	b := make([]byte, 512)
	copy(b, "\xeb\x3c\x90mkfs.fat")
	binary.LittleEndian.PutUint16(b[11:], 512)
	b[13] = 4
	copy(b[0x36:], "FAT12   ")
	copy(b[0x2b:], fmt.Sprintf("%-11s", lbl))
	b[510], b[511] = 0x55, 0xaa
	return b
}

// isoImage is the start of an iso9660 filesystem (its primary volume
// descriptor) with volume id lbl, as genisoimage -V writes it.
func isoImage(lbl string) []byte {
	b := make([]byte, 0x8800)
	pvd := b[0x8000:]
	pvd[0] = 1
	copy(pvd[1:], "CD001")
	pvd[6] = 1
	copy(pvd[40:72], fmt.Sprintf("%-32s", lbl))
	return b
}

// FuzzFind checks how /init finds seed disks among the block devices: one
// disk holds the fuzzed bytes, the next a real NoCloud seed. No panic; the
// fuzzed disk is a seed exactly when it is vfat or iso9660 labelled cidata or
// config-2 (any case), with the kind that label names; whatever the fuzzed
// disk holds, the real seed is still found, after it (name order).
func FuzzFind(f *testing.F) {
	ext4 := make([]byte, 2048)
	binary.LittleEndian.PutUint16(ext4[1024+56:], 0xef53)
	copy(ext4[1024+120:], "cidata")
	for _, s := range [][]byte{
		fatImage("CIDATA"), fatImage("cidata"), fatImage("DATA"), fatImage("config-2"), fatImage("CIDATA\x00x"),
		isoImage("cidata"), isoImage("CONFIG-2"), isoImage("config-2 "), ext4, nil, make([]byte, 4096),
	} {
		f.Add(s)
	}
	good := fatImage("CIDATA")
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		sys, dev := filepath.Join(dir, "sys"), filepath.Join(dir, "dev")
		for name, b := range map[string][]byte{"vda": data, "vdb": good} {
			if err := os.MkdirAll(filepath.Join(sys, "class/block", name), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(dev, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dev, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		seeds := findFuzz(sys, dev)
		if len(seeds) == 0 || seeds[len(seeds)-1] != (Seed{Device: filepath.Join(dev, "vdb"), FSType: "vfat", Label: "CIDATA", Kind: NoCloud}) {
			t.Fatalf("Find with %q on vda = %+v: the seed on vdb is not found last", data, seeds)
		}
		if len(seeds) > 2 {
			t.Fatalf("Find with %q on vda = %+v: more seeds than disks", data, seeds)
		}
		if len(seeds) == 1 {
			return
		}
		s := seeds[0]
		want := map[string]string{"cidata": NoCloud, "config-2": ConfigDrive}[strings.ToLower(s.Label)]
		if s.Device != filepath.Join(dev, "vda") || s.FSType != "vfat" && s.FSType != "iso9660" || want == "" || s.Kind != want {
			t.Fatalf("Find with %q on vda = %+v", data, s)
		}
	})
}

// fuzzMounter "mounts" a seed by writing its user-data file into the
// directory, and counts its unmounts.
type fuzzMounter struct {
	name      string
	data      []byte
	unmounted int
}

func (m *fuzzMounter) Mount(dev, dir, fstype string) error {
	p := filepath.Join(dir, m.name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, m.data, 0o644)
}

func (m *fuzzMounter) Unmount(dir string) error {
	m.unmounted++
	return nil
}

// FuzzRead checks the read of a seed's user-data (written by whoever made the
// seed disk: the instance owner): no panic; it never returns more than its
// bound; what fits comes back whole, byte for byte; what does not is an error
// naming the seed and the bound, with no data; and the seed is unmounted
// once, whatever happened.
func FuzzRead(f *testing.F) {
	for _, s := range []struct {
		data   string
		max    uint16
		config bool
	}{
		{"#cloud-config\nkpreload:\n  driver: nvidia\n  version: \"550.127.08\"\n", 4096, false},
		{"#cloud-config\nkpreload:\n  driver: nvidia-open\n", 4096, true},
		{"#!/bin/sh\necho hi\n", 16, false},
		{"", 0, false},
		{"x", 0, true},
		{"\x1f\x8b\x08\x00", 1, false},
		{strings.Repeat("a: [", 100), 399, false},
		{strings.Repeat("a: [", 100), 400, false},
	} {
		f.Add([]byte(s.data), s.max, s.config)
	}
	f.Fuzz(func(t *testing.T, data []byte, max uint16, configDrive bool) {
		s := Seed{Device: "/dev/vdb", FSType: "vfat", Label: "CIDATA", Kind: NoCloud}
		if configDrive {
			s = Seed{Device: "/dev/sr0", FSType: "iso9660", Label: "config-2", Kind: ConfigDrive}
		}
		m := &fuzzMounter{name: s.UserData(), data: data}
		got, err := readFuzz(s, filepath.Join(t.TempDir(), "seed"), m, int64(max))
		if m.unmounted != 1 {
			t.Fatalf("Read of %d bytes (bound %d): unmounted %d times, want once", len(data), max, m.unmounted)
		}
		if len(got) > int(max) {
			t.Fatalf("Read of %d bytes (bound %d) returned %d bytes", len(data), max, len(got))
		}
		if len(data) <= int(max) {
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("Read of %d bytes (bound %d) = %q, %v; want the data", len(data), max, got, err)
			}
			return
		}
		if err == nil || got != nil || !strings.Contains(err.Error(), s.String()) || !strings.Contains(err.Error(), fmt.Sprint(max)) {
			t.Fatalf("Read of %d bytes (bound %d) = %q, %v; want an error naming %s and the bound", len(data), max, got, err, s)
		}
	})
}
