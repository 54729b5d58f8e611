// Package fwcfg reads a file from QEMU's fw_cfg device through its x86 I/O
// ports, for /init before it has loaded qemu_fw_cfg. That module registers
// every fw_cfg file in sysfs as it loads, which under emulation costs tens of
// milliseconds on the boot's critical path; a lookup through the ports reads
// the file directory (a few kilobytes) and the one file.
//
// The interface is QEMU's "traditional" one (docs/specs/fw_cfg.rst in QEMU):
// a 16-bit write of a key to the selector port, then byte reads from the
// data port. Callers must know the device is there (ACPI QEMU0002) before
// calling ReadFile: on other hardware those ports may belong to something else.
package fwcfg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
)

// Keys of the items this package reads.
const (
	keySignature = 0x0000
	keyFileDir   = 0x0019
)

// MaxFileSize is the largest file ReadFile returns; an instance request is
// a few hundred bytes.
const MaxFileSize = 1 << 20

// maxFiles bounds the directory's count, which comes from the device.
const maxFiles = 4096

// dirEntrySize is the size of one FWCfgFile record: size (be32), select
// (be16), reserved (be16), name (56 bytes, NUL-terminated).
const dirEntrySize = 64

// ErrUnsupported says port access to fw_cfg does not exist on this architecture.
var ErrUnsupported = errors.New("fw_cfg through I/O ports is only available on x86")

// Device is fw_cfg's traditional interface: Select makes a key current and
// Read reads the next bytes of its item.
type Device interface {
	Select(key uint16)
	Read(p []byte)
}

// Entry is one file of the fw_cfg directory.
type Entry struct {
	Name string
	Key  uint16
	Size uint32
}

// Lookup reads the signature and the file directory from dev and returns
// the entry named name, fs.ErrNotExist when there is none, or an error when
// the device does not answer as fw_cfg does.
func Lookup(dev Device, name string) (Entry, error) {
	sig := make([]byte, 4)
	dev.Select(keySignature)
	dev.Read(sig)
	if string(sig) != "QEMU" {
		return Entry{}, fmt.Errorf("fw_cfg: signature %q, want \"QEMU\"", sig)
	}
	head := make([]byte, 4)
	dev.Select(keyFileDir)
	dev.Read(head)
	n := binary.BigEndian.Uint32(head)
	if n > maxFiles {
		return Entry{}, fmt.Errorf("fw_cfg: the file directory claims %d files (at most %d)", n, maxFiles)
	}
	rec := make([]byte, dirEntrySize)
	for i := uint32(0); i < n; i++ {
		dev.Read(rec)
		e, err := parseEntry(rec)
		if err != nil {
			return Entry{}, fmt.Errorf("fw_cfg: file directory entry %d: %w", i, err)
		}
		if e.Name == name {
			return e, nil
		}
	}
	return Entry{}, fmt.Errorf("fw_cfg: %s: %w", name, fs.ErrNotExist)
}

// parseEntry decodes one FWCfgFile record.
func parseEntry(rec []byte) (Entry, error) {
	if len(rec) != dirEntrySize {
		return Entry{}, fmt.Errorf("%d bytes, want %d", len(rec), dirEntrySize)
	}
	name := rec[8:]
	end := 0
	for end < len(name) && name[end] != 0 {
		end++
	}
	if end == len(name) {
		return Entry{}, errors.New("name is not NUL-terminated")
	}
	return Entry{
		Size: binary.BigEndian.Uint32(rec[0:4]),
		Key:  binary.BigEndian.Uint16(rec[4:6]),
		Name: string(name[:end]),
	}, nil
}

// ReadFrom returns the contents of the file name on dev (see Lookup).
func ReadFrom(dev Device, name string) ([]byte, error) {
	e, err := Lookup(dev, name)
	if err != nil {
		return nil, err
	}
	if e.Size > MaxFileSize {
		return nil, fmt.Errorf("fw_cfg: %s is %d bytes (at most %d)", name, e.Size, MaxFileSize)
	}
	data := make([]byte, e.Size)
	dev.Select(e.Key)
	dev.Read(data)
	return data, nil
}

// ReadFile returns the contents of the fw_cfg file name ("opt/...") read
// through the I/O ports, fs.ErrNotExist when the device has no such file,
// ErrUnsupported off x86, or the error that kept the ports closed (EPERM
// under lockdown or without CAP_SYS_RAWIO).
func ReadFile(name string) ([]byte, error) {
	var data []byte
	err := withPorts(func(dev Device) error {
		var err error
		data, err = ReadFrom(dev, name)
		return err
	})
	return data, err
}
