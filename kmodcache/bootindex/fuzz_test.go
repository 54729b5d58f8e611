package bootindex

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// realIndex is a boot index the store wrote for an image (the kpreload-edu
// test driver for 6.12.118+deb13-cloud-amd64).
const realIndex = `{
  "format": 1,
  "kernel": "6.12.118+deb13-cloud-amd64",
  "sets": [
    {
      "id": "8167e3319ac51aeb83ca0d1e5c340f507d2789972df03e1014b6467207004e1d",
      "driver": "kpreload-edu",
      "version": "1.0.0",
      "flavor": "open",
      "dir": "../objects/sha256",
      "modules": [
        {
          "name": "kpreload_edu",
          "path": "2b/2b52663b4461fa0dfc1bbab98512279713c184b9e936f57b7598c0d28e15d22d",
          "sha256": "2b52663b4461fa0dfc1bbab98512279713c184b9e936f57b7598c0d28e15d22d",
          "size": 14232,
          "vermagic": "6.12.118+deb13-cloud-amd64 SMP preempt mod_unload modversions ",
          "aliases": [
            "pci:v00001234d000011E8sv*sd*bc*sc*i*"
          ]
        }
      ]
    }
  ]
}
`

// FuzzRead checks the boot index reader /init starts from: no panic; an error
// names the file and comes without an index; an accepted index has the
// current format and, written with Marshal and read again, is the same index
// and the same bytes.
func FuzzRead(f *testing.F) {
	f.Add([]byte(realIndex))
	kernelSet := &Index{Format: FormatVersion, Kernel: "6.1.0-56-cloud-amd64", Sets: []Set{{
		ID: "kernel", Dir: "../objects/sha256", Firmware: []string{"nvidia/535.261.03/gsp_ga10x.bin"}, SupportedGPUs: "ab/abcd",
		Modules: []Module{{Name: "virtio_net", Path: "bb/bb88", SHA256: "bb88", Size: 10, Compression: "xz", Vermagic: "6.1.0-56-cloud-amd64 SMP",
			Depends: []string{"net_failover"}, SoftPre: []string{"crc32c"}, Firmware: []string{"x.bin"}}},
	}}}
	b, err := Marshal(kernelSet)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	for _, s := range []string{"", "{}", `{"format":2,"kernel":"x","sets":[]}`, `{"format":1}`, `{"format":1,"sets":null}`,
		`{"format":1,"sets":[{"modules":[{"size":-1,"aliases":null}]}]}`, `{"format":1,"FORMAT":2}`, `[1]`, `{"format":1} {}`,
		`{"format":1,"kernel":"\ud800"}`, realIndex[:100]} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	path := filepath.Join(dir, "kpreload.index.json")
	path2 := filepath.Join(dir, "again.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		ix, err := Read(path)
		if err != nil {
			if ix != nil {
				t.Fatalf("Read returned both %+v and error %v", ix, err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if ix == nil || ix.Format != FormatVersion {
			t.Fatalf("Read accepted %+v", ix)
		}
		out, err := Marshal(ix)
		if err != nil {
			t.Fatalf("Marshal(%+v): %v", ix, err)
		}
		if err := Write(path2, ix); err != nil {
			t.Fatalf("Write: %v", err)
		}
		again, err := Read(path2)
		if err != nil {
			t.Fatalf("re-read of\n%s\n: %v", out, err)
		}
		if !reflect.DeepEqual(again, ix) {
			t.Fatalf("round trip changed the index:\n%+v\n%+v", ix, again)
		}
		out2, err := Marshal(again)
		if err != nil || string(out2) != string(out) {
			t.Fatalf("Marshal not stable:\n%s\n%s (%v)", out, out2, err)
		}
	})
}
