// Package supported reads NVIDIA's supported-gpus.json (shipped by the Debian
// nvidia-driver packages as /usr/share/doc/<package>/supported-gpus.json.gz) and
// answers whether a driver version supports a PCI device.
package supported

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/kpreload/kpreload/gpu/pci"
	"github.com/kpreload/kpreload/internal/inroot"
)

// FeatureKernelOpen is the feature of chips NVIDIA's open kernel modules support.
const FeatureKernelOpen = "kernelopen"

// List is one driver version's supported-gpus.json.
type List struct {
	// Path is the file the list was read from.
	Path  string `json:"-"`
	Chips []Chip `json:"chips"`
}

// Chip is one entry of the list: a device id, optionally narrowed to one
// subsystem (a board), with its name and features.
type Chip struct {
	DevID       string `json:"devid"`
	SubDevID    string `json:"subdevid,omitempty"`
	SubVendorID string `json:"subvendorid,omitempty"`
	Name        string `json:"name"`
	// LegacyBranch, when set ("470.xx"), says the chip is supported only by that
	// older branch, not by the version whose list this is.
	LegacyBranch string   `json:"legacybranch,omitempty"`
	Features     []string `json:"features"`

	dev, subdev, subvendor uint16
	hasSub                 bool
}

// KernelOpen reports whether the open kernel modules support the chip.
func (c *Chip) KernelOpen() bool { return slices.Contains(c.Features, FeatureKernelOpen) }

// Branch returns the major version of LegacyBranch ("470" for "470.xx"), or "".
func (c *Chip) Branch() string {
	b, _, _ := strings.Cut(c.LegacyBranch, ".")
	return b
}

// MaxFile bounds a supported-gpus.json, compressed as read and
// uncompressed (NVIDIA's are about 1 MiB).
const MaxFile = 16 << 20

// ReadFile reads a supported-gpus.json, plain or gzip-compressed.
func ReadFile(path string) (*List, error) {
	b, err := inroot.ReadPath(path, MaxFile)
	if err != nil {
		return nil, fmt.Errorf("supported-gpus: %w", err)
	}
	l, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("supported-gpus %s: %w", path, err)
	}
	l.Path = path
	return l, nil
}

// Parse parses a supported-gpus.json (gzip is detected and undone) and checks
// every chip's ids.
func Parse(b []byte) (*List, error) {
	if bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		if b, err = io.ReadAll(io.LimitReader(zr, MaxFile+1)); err != nil {
			return nil, fmt.Errorf("gunzip: %w", err)
		}
		if len(b) > MaxFile {
			return nil, fmt.Errorf("gunzip: more than %d bytes", MaxFile)
		}
	}
	var l List
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, err
	}
	if len(l.Chips) == 0 {
		return nil, fmt.Errorf("no chips listed")
	}
	for i := range l.Chips {
		c := &l.Chips[i]
		v, err := pci.ParseHex(c.DevID, 16)
		if err != nil {
			return nil, fmt.Errorf("chip %d (%s): devid: %w", i, c.Name, err)
		}
		c.dev = uint16(v)
		if c.SubDevID == "" && c.SubVendorID == "" {
			continue
		}
		sd, err1 := pci.ParseHex(c.SubDevID, 16)
		sv, err2 := pci.ParseHex(c.SubVendorID, 16)
		if err := cmpErr(err1, err2); err != nil {
			return nil, fmt.Errorf("chip %d (%s): subsystem ids: %w", i, c.Name, err)
		}
		c.subdev, c.subvendor, c.hasSub = uint16(sd), uint16(sv), true
	}
	return &l, nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// Lookup returns the entry for an NVIDIA device: the one listing the device's
// own subsystem ids if any, otherwise the one for its device id without
// subsystem ids. A device whose id is listed only for other subsystems is not
// supported.
func (l *List) Lookup(d pci.Device) (Chip, bool) {
	if d.Vendor != pci.VendorNVIDIA {
		return Chip{}, false
	}
	var generic *Chip
	for i := range l.Chips {
		c := &l.Chips[i]
		if c.dev != d.Device {
			continue
		}
		if c.hasSub {
			if c.subdev == d.SubDevice && c.subvendor == d.SubVendor {
				return *c, true
			}
			continue
		}
		if generic == nil {
			generic = c
		}
	}
	if generic != nil {
		return *generic, true
	}
	return Chip{}, false
}

// Names returns the names listed for a device id under any subsystem, for
// messages about devices a list does not support for their subsystem.
func (l *List) Names(device uint16) []string {
	var names []string
	for _, c := range l.Chips {
		if c.dev == device && !slices.Contains(names, c.Name) {
			names = append(names, c.Name)
		}
	}
	return names
}
