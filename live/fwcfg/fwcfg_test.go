package fwcfg

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"strings"
	"testing"
)

// fakeDevice serves items by key, as QEMU's fw_cfg does: Select rewinds.
type fakeDevice struct {
	items map[uint16][]byte
	cur   []byte
}

func (d *fakeDevice) Select(key uint16) { d.cur = d.items[key] }

func (d *fakeDevice) Read(p []byte) {
	for i := range p {
		if len(d.cur) == 0 {
			p[i] = 0 // QEMU reads past an item's end as 0
			continue
		}
		p[i], d.cur = d.cur[0], d.cur[1:]
	}
}

type file struct {
	name string
	key  uint16
	data []byte
}

// newDevice lays out a device with the signature sig and files.
func newDevice(sig string, files ...file) *fakeDevice {
	dir := binary.BigEndian.AppendUint32(nil, uint32(len(files)))
	items := map[uint16][]byte{keySignature: []byte(sig)}
	for _, f := range files {
		rec := make([]byte, dirEntrySize)
		binary.BigEndian.PutUint32(rec[0:], uint32(len(f.data)))
		binary.BigEndian.PutUint16(rec[4:], f.key)
		copy(rec[8:], f.name)
		dir = append(dir, rec...)
		items[f.key] = f.data
	}
	items[keyFileDir] = dir
	return &fakeDevice{items: items}
}

func TestReadFrom(t *testing.T) {
	yaml := []byte("driver:\n  version: \"550.163.01\"\n")
	qemu := []file{
		{"bootorder", 0x20, []byte("/pci@i0cf8/\x00")},
		{"etc/e820", 0x21, make([]byte, 40)},
		{"opt/kpreload/instance.yaml", 0x2a, yaml},
	}
	longName := newDevice("QEMU", file{strings.Repeat("x", 56), 0x20, nil})
	huge := newDevice("QEMU")
	binary.BigEndian.PutUint32(huge.items[keyFileDir], maxFiles+1)
	for _, tc := range []struct {
		name     string
		dev      *fakeDevice
		want     string
		wantErr  string
		notThere bool
	}{
		{name: "found", dev: newDevice("QEMU", qemu...), want: string(yaml)},
		{name: "empty file", dev: newDevice("QEMU", file{"opt/kpreload/instance.yaml", 0x20, nil}), want: ""},
		{name: "absent", dev: newDevice("QEMU", qemu[:2]...), notThere: true},
		{name: "no files", dev: newDevice("QEMU"), notThere: true},
		{name: "not fw_cfg", dev: newDevice("\xff\xff\xff\xff", qemu...), wantErr: `signature "\xff\xff\xff\xff"`},
		{name: "name without NUL", dev: longName, wantErr: "entry 0: name is not NUL-terminated"},
		{name: "count too large", dev: huge, wantErr: "claims 4097 files"},
		{name: "file too large", dev: newDevice("QEMU", file{"opt/kpreload/instance.yaml", 0x20, make([]byte, MaxFileSize+1)}), wantErr: "1048577 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadFrom(tc.dev, "opt/kpreload/instance.yaml")
			switch {
			case tc.notThere:
				if !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("ReadFrom = %q, %v; want fs.ErrNotExist", got, err)
				}
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ReadFrom = %q, %v; want an error with %q", got, err, tc.wantErr)
				}
			case err != nil:
				t.Fatalf("ReadFrom: %v", err)
			case string(got) != tc.want:
				t.Fatalf("ReadFrom = %q, want %q", got, tc.want)
			}
		})
	}
}

// FuzzLookup feeds Lookup a file directory as the device gives it: whatever
// it holds, Lookup returns an entry that is in it or an error, and never panics.
func FuzzLookup(f *testing.F) {
	f.Add(newDevice("QEMU", file{"opt/kpreload/instance.yaml", 0x2a, []byte("a: b")}).items[keyFileDir])
	f.Add([]byte{0, 0, 0, 1})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, dir []byte) {
		dev := &fakeDevice{items: map[uint16][]byte{keySignature: []byte("QEMU"), keyFileDir: dir}}
		e, err := Lookup(dev, "opt/kpreload/instance.yaml")
		if err == nil && e.Name != "opt/kpreload/instance.yaml" {
			t.Fatalf("Lookup found %+v for another name", e)
		}
	})
}
