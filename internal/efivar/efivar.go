// Package efivar reads the string EFI variables systemd-boot sets, as
// efivarfs shows them: four bytes of attributes, then UTF-16LE text ending
// in a NUL.
package efivar

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"unicode/utf16"

	"github.com/kpreload/kpreload/internal/inroot"
)

// LoaderGUID is the vendor GUID of systemd-boot's variables (the Boot Loader Interface).
const LoaderGUID = "4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"

// maxSize bounds a variable: systemd-boot's strings are paths and numbers.
const maxSize = 4096

// String reads the variable name-LoaderGUID in dir (where efivarfs is
// mounted) as text; ok is false when the variable is not set.
func String(dir, name string) (s string, ok bool, err error) {
	file := filepath.Join(dir, name+"-"+LoaderGUID)
	b, err := inroot.ReadPath(file, maxSize)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("EFI variable %s: %w", name, err)
	}
	if len(b) < 4 || len(b)%2 != 0 {
		return "", false, fmt.Errorf("EFI variable %s: %d bytes, not an EFI variable of UTF-16", name, len(b))
	}
	u := make([]uint16, 0, (len(b)-4)/2)
	for i := 4; i+1 < len(b); i += 2 {
		c := binary.LittleEndian.Uint16(b[i:])
		if c == 0 {
			break
		}
		u = append(u, c)
	}
	return string(utf16.Decode(u)), true, nil
}

// LoaderTimes reads how long the firmware and systemd-boot ran before the
// kernel started, in seconds, as systemd-analyze does: the firmware up to
// LoaderTimeInitUSec, the boot loader from then to LoaderTimeExecUSec. ok
// is false when the boot loader set neither (GRUB, a BIOS boot, a direct
// kernel boot).
func LoaderTimes(dir string) (firmware, loader float64, ok bool, err error) {
	usec := func(name string) (uint64, bool, error) {
		s, ok, err := String(dir, name)
		if err != nil || !ok {
			return 0, ok, err
		}
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("EFI variable %s: %w", name, err)
		}
		return v, true, nil
	}
	init, okInit, err := usec("LoaderTimeInitUSec")
	if err != nil {
		return 0, 0, false, err
	}
	exec, okExec, err := usec("LoaderTimeExecUSec")
	if err != nil {
		return 0, 0, false, err
	}
	if !okInit || !okExec {
		return 0, 0, false, nil
	}
	if exec < init {
		return 0, 0, false, fmt.Errorf("EFI variables: the boot loader handed over (%d µs) before it started (%d µs)", exec, init)
	}
	return float64(init) / 1e6, float64(exec-init) / 1e6, true, nil
}
