package manifest

import (
	"reflect"
	"strings"
	"testing"
)

// realManifest is a manifest the store wrote (the kpreload-edu test driver
// built by the real dkms for 6.12.118+deb13-cloud-amd64).
const realManifest = `{
  "format": 1,
  "kernel": "6.12.118+deb13-cloud-amd64",
  "vermagic": "6.12.118+deb13-cloud-amd64 SMP preempt mod_unload modversions ",
  "driver": "kpreload-edu",
  "version": "1.0.0",
  "flavor": "open",
  "modules": [
    {
      "name": "kpreload_edu",
      "file": "kpreload_edu.ko",
      "sha256": "2b52663b4461fa0dfc1bbab98512279713c184b9e936f57b7598c0d28e15d22d",
      "size": 14232,
      "elf_size": 14232,
      "vermagic": "6.12.118+deb13-cloud-amd64 SMP preempt mod_unload modversions ",
      "srcversion": "94E2F8F5FE071BA8D197B5C",
      "version": "1.0.0",
      "aliases": [
        "pci:v00001234d000011E8sv*sd*bc*sc*i*"
      ],
      "signed": false
    }
  ],
  "cache_key": {
    "compiler": "trixie build root: x86_64-linux-gnu-gcc-14 (Debian 14.2.0-19) 14.2.0",
    "driver": "kpreload-edu",
    "kernel": "6.12.118+deb13-cloud-amd64",
    "schema": "kpreload-build/1",
    "source_sha256": "ca5e47cf4a847ec3a0daf6da8f46ea8ea447c801fd43668ef8e1367b0532a480",
    "version": "1.0.0"
  }
}
`

// FuzzUnmarshal checks the manifest reader: no panic; errors come without a
// manifest; Validate never panics on what Unmarshal accepts; the canonical
// form (Marshal) re-parses to a manifest with the same canonical bytes and ID,
// and validity survives the round trip.
func FuzzUnmarshal(f *testing.F) {
	f.Add([]byte(realManifest))
	m := validManifest()
	m.SupportedGPUs = &File{File: SupportedGPUsFile, SHA256: digest('c'), Size: 12}
	m.Modules[0].Softdeps = []string{"pre: ecdh_generic"}
	m.CacheKey = map[string]string{"b": "2", "a": "1"}
	b, err := Marshal(m)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	for _, s := range []string{"", "{}", `{"format":2}`, `{"format":1,"unknown":1}`, `{"format":1} x`, `{"format":1}}`,
		`{"format":1,"modules":[{"name":"a","depends":["a"]}]}`, `{"format":1,"modules":[null]}`, `{"format":1,"cache_key":{"a":"\u0000"}}`,
		realManifest[:200]} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Unmarshal(data)
		if err != nil {
			if m != nil {
				t.Fatalf("Unmarshal returned both %+v and error %v", m, err)
			}
			if !strings.HasPrefix(err.Error(), "parse manifest: ") {
				t.Fatalf("error %q does not say what was parsed", err)
			}
			return
		}
		if m == nil || m.Format != FormatVersion {
			t.Fatalf("Unmarshal accepted %+v", m)
		}
		verr := m.Validate()
		canon, err := Marshal(m)
		if err != nil {
			t.Fatalf("Marshal(%+v): %v", m, err)
		}
		again, err := Unmarshal(canon)
		if err != nil {
			t.Fatalf("canonical form does not parse: %v\n%s", err, canon)
		}
		canon2, err := Marshal(again)
		if err != nil || string(canon2) != string(canon) {
			t.Fatalf("canonical form not stable:\n%s\n%s (%v)", canon, canon2, err)
		}
		if IDOf(canon) != IDOf(canon2) {
			t.Fatal("ID changed over a round trip")
		}
		id, err := ID(m)
		if err != nil || id != IDOf(canon) {
			t.Fatalf("ID(m) = %q, %v; want %q", id, err, IDOf(canon))
		}
		verr2 := again.Validate()
		if (verr == nil) != (verr2 == nil) {
			t.Fatalf("validity changed over a round trip: %v, then %v", verr, verr2)
		}
		if verr == nil {
			// A valid manifest is already canonical up to ordering: canonicalizing
			// a copy again changes nothing.
			c := again.Clone()
			c.Canonicalize()
			if !reflect.DeepEqual(c, again.Clone()) {
				t.Fatalf("canonical manifest changed by Canonicalize: %+v", again)
			}
		}
	})
}
