package supported_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/kpreload/kpreload/gpu/pci"
	"github.com/kpreload/kpreload/gpu/supported"
)

// realChips are entries copied from the real supported-gpus.json of
// nvidia-tesla-535-driver 535.216.03 (legacy branches, subsystem ids,
// kernelopen).
const realChips = `{"chips": [
{"devid": "0x0020", "name": "RIVA TNT", "legacybranch": "71.86.xx", "features": []},
{"devid": "0x05E7", "subdevid": "0x0595", "subvendorid": "0x10DE", "name": "Tesla T10 Processor", "legacybranch": "340.xx", "features": ["vdpaufeaturesetA"]},
{"devid": "0x05E7", "subdevid": "0x068F", "subvendorid": "0x10DE", "name": "Tesla T10 Processor", "legacybranch": "340.xx", "features": ["vdpaufeaturesetA"]},
{"devid": "0x1E02", "name": "NVIDIA TITAN RTX", "features": ["dpycbcr420", "dpgsynccompatible", "hdmi4k60rgb444", "hdmigsynccompatible", "runtimepm", "vdpaufeaturesetJ", "kernelopen"]},
{"devid": "0x1E04", "name": "NVIDIA GeForce RTX 2080 Ti", "features": ["dpycbcr420", "dpgsynccompatible", "hdmi4k60rgb444", "hdmigsynccompatible", "runtimepm", "vdpaufeaturesetJ", "kernelopen"]},
{"devid": "0x2335", "name": "NVIDIA H200", "features": ["kernelopen"]}
]}`

func gz(tb testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(b); err != nil {
		tb.Fatal(err)
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// FuzzParse checks the supported-gpus.json reader: no panic; errors come
// without a list; an accepted list has chips whose ids are 16-bit hex, each
// found by Lookup for its own ids (never for another vendor) and named by
// Names; the list written back as JSON, plain or gzip-compressed, parses to
// the same list.
func FuzzParse(f *testing.F) {
	f.Add([]byte(realChips))
	f.Add(gz(f, []byte(realChips)))
	for _, s := range []string{"", "{}", `{"chips":[]}`, `{"chips":null}`, `{"chips":[{"devid":"0x"}]}`, `{"chips":[{"devid":"0X1e02","subdevid":"1"}]}`,
		`{"chips":[{"devid":"10000"}]}`, `{"chips":[{"devid":"+1"}]}`, `{"chips":[{"devid":"1_0"}]}`, "\x1f\x8b", realChips[:150]} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := supported.Parse(data)
		if err != nil {
			if l != nil {
				t.Fatalf("Parse returned both %+v and error %v", l, err)
			}
			return
		}
		if l == nil || len(l.Chips) == 0 {
			t.Fatalf("Parse accepted %+v", l)
		}
		for _, c := range l.Chips {
			dev, err := pci.ParseHex(c.DevID, 16)
			if err != nil {
				t.Fatalf("accepted devid %q: %v", c.DevID, err)
			}
			d := pci.Device{Vendor: pci.VendorNVIDIA, Device: uint16(dev)}
			if c.SubDevID != "" || c.SubVendorID != "" {
				sd, err1 := pci.ParseHex(c.SubDevID, 16)
				sv, err2 := pci.ParseHex(c.SubVendorID, 16)
				if err1 != nil || err2 != nil {
					t.Fatalf("accepted subsystem ids %q %q", c.SubDevID, c.SubVendorID)
				}
				d.SubDevice, d.SubVendor = uint16(sd), uint16(sv)
			}
			got, ok := l.Lookup(d)
			if !ok {
				t.Fatalf("Lookup(%+v) does not find chip %+v", d, c)
			}
			if gd, _ := pci.ParseHex(got.DevID, 16); gd != dev {
				t.Fatalf("Lookup(%+v) = chip %+v", d, got)
			}
			if !slices.Contains(l.Names(d.Device), c.Name) {
				t.Fatalf("Names(%#x) = %q, missing %q", d.Device, l.Names(d.Device), c.Name)
			}
			d.Vendor = 0x1234
			if _, ok := l.Lookup(d); ok {
				t.Fatalf("Lookup found a chip for vendor 0x1234")
			}
		}
		out, err := json.Marshal(l)
		if err != nil {
			t.Fatalf("json.Marshal: %v", err)
		}
		for _, b := range [][]byte{out, gz(t, out)} {
			again, err := supported.Parse(b)
			if err != nil {
				t.Fatalf("re-parse of %s: %v", out, err)
			}
			if !reflect.DeepEqual(again, l) {
				t.Fatalf("round trip changed the list:\n%+v\n%+v", l, again)
			}
		}
	})
}
