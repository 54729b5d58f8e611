package cdispec

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// encodeLdcache writes entries as glibc's ldconfig does in the current
// format (glibc-ld.so.cache1.1), after an old-format section of oldN entries
// when oldN >= 0.
func encodeLdcache(entries []LdcacheEntry, oldN int) []byte {
	var out bytes.Buffer
	if oldN >= 0 {
		out.WriteString(oldMagic)
		out.WriteByte(0)
		binary.Write(&out, binary.LittleEndian, uint32(oldN))
		out.Write(make([]byte, oldN*12))
		for out.Len()%8 != 0 {
			out.WriteByte(0)
		}
	}
	const hdr, entSize = 48, 24
	strs := hdr + len(entries)*entSize
	var table bytes.Buffer
	h := make([]byte, hdr)
	copy(h, newMagic)
	binary.LittleEndian.PutUint32(h[20:], uint32(len(entries)))
	ents := make([]byte, len(entries)*entSize)
	for i, e := range entries {
		binary.LittleEndian.PutUint32(ents[i*entSize:], 0x303) // flags: ELF x86-64
		binary.LittleEndian.PutUint32(ents[i*entSize+4:], uint32(strs+table.Len()))
		table.WriteString(e.Name + "\x00")
		binary.LittleEndian.PutUint32(ents[i*entSize+8:], uint32(strs+table.Len()))
		table.WriteString(e.Path + "\x00")
	}
	binary.LittleEndian.PutUint32(h[24:], uint32(table.Len()))
	out.Write(h)
	out.Write(ents)
	out.Write(table.Bytes())
	return out.Bytes()
}

var ldcacheSeed = []LdcacheEntry{
	{"libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1"},
	{"libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1"},
}

func TestEncodeLdcache(t *testing.T) {
	for _, oldN := range []int{-1, 0, 3} {
		got, err := parseLdcache(encodeLdcache(ldcacheSeed, oldN))
		if err != nil || !reflect.DeepEqual(got, ldcacheSeed) {
			t.Errorf("old section of %d: parse = %v, %v; want %v", oldN, got, err, ldcacheSeed)
		}
	}
}

// FuzzLdcache feeds any bytes as <root>/etc/ld.so.cache to ReadLdcache: it
// agrees with parseLdcache, never panics, and what it parses encodes back to
// a cache that parses to the same entries.
func FuzzLdcache(f *testing.F) {
	f.Add(encodeLdcache(ldcacheSeed, -1))
	f.Add(encodeLdcache(ldcacheSeed, 2))
	f.Add(encodeLdcache(nil, -1))
	f.Add([]byte(newMagic))
	f.Add([]byte(oldMagic + "\x00\xff\xff\xff\xff"))
	f.Add([]byte("not a cache"))
	f.Add([]byte{})
	root := f.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(filepath.Join(root, "etc/ld.so.cache"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		entries, err := ReadLdcache(root, "/etc/ld.so.cache")
		parsed, perr := parseLdcache(b)
		if (err == nil) != (perr == nil) || !reflect.DeepEqual(entries, parsed) {
			t.Fatalf("ReadLdcache = %v, %v; parseLdcache = %v, %v", entries, err, parsed, perr)
		}
		if err != nil {
			if !strings.Contains(err.Error(), filepath.Join(root, "etc/ld.so.cache")) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		for _, e := range entries {
			if strings.ContainsRune(e.Name, 0) || strings.ContainsRune(e.Path, 0) {
				t.Fatalf("entry %q holds a NUL", e)
			}
		}
		again, err := parseLdcache(encodeLdcache(entries, -1))
		if err != nil || (len(entries) > 0 && !reflect.DeepEqual(again, entries)) {
			t.Fatalf("entries %q re-encoded parse to %q, %v", entries, again, err)
		}
	})
}

// FuzzReadGPUs feeds any two /proc/driver/nvidia/gpus/<bus>/information files
// ("" leaves one out) to readGPUs: a GPU per file, sorted by minor, each with
// its bus; an error names the file.
func FuzzReadGPUs(f *testing.F) {
	info := testenv.H200Proc(f)["proc/driver/nvidia/gpus/0000:00:06.0/information"]
	f.Add(string(info), "")
	f.Add(string(info), "Device Minor: 0\nGPU UUID: GPU-x\n")
	f.Add("Device Minor:\t 4294967295 \n", "Device Minor: 4294967296\n")
	f.Add("GPU UUID: GPU-1\n", "\n")
	f.Add("", "")
	root := f.TempDir()
	dir := "/proc/driver/nvidia/gpus"
	buses := []string{"0000:00:06.0", "0000:41:00.0"}
	f.Fuzz(func(t *testing.T, info0, info1 string) {
		want := 0
		for i, s := range []string{info0, info1} {
			p := filepath.Join(root, dir, buses[i], "information")
			os.Remove(p)
			if s == "" {
				continue
			}
			want++
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		gpus, err := readGPUs(root, dir)
		if err != nil {
			if !strings.Contains(err.Error(), filepath.Join(root, dir)) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if len(gpus) != want {
			t.Fatalf("%d GPUs from %d files: %+v", len(gpus), want, gpus)
		}
		if !sort.SliceIsSorted(gpus, func(i, j int) bool { return gpus[i].Minor < gpus[j].Minor }) {
			t.Fatalf("GPUs not sorted by minor: %+v", gpus)
		}
		for _, g := range gpus {
			if g.Bus != buses[0] && g.Bus != buses[1] {
				t.Fatalf("GPU bus %q is not a directory's name", g.Bus)
			}
			if g.UUID != strings.TrimSpace(g.UUID) {
				t.Fatalf("UUID %q not trimmed", g.UUID)
			}
		}
	})
}

// FuzzReadVersion feeds any /proc/driver/nvidia/version to ReadVersion: the
// version it returns is digits and dots, a word of an NVRM line; an error
// names the file.
func FuzzReadVersion(f *testing.F) {
	v := testenv.H200Proc(f)["proc/driver/nvidia/version"]
	f.Add(string(v))
	f.Add("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Wed Jul 30 2025\n")
	f.Add("NVRM version: 1.\nGCC version: 12.2\n")
	f.Add("GCC version: 12.2.0\n")
	f.Add("")
	root := f.TempDir()
	name := "/proc/driver/nvidia/version"
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(name)), 0o755); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, content string) {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := ReadVersion(root, name)
		if err != nil {
			if !strings.Contains(err.Error(), filepath.Join(root, name)) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if !isVersion(got) {
			t.Fatalf("version %q is not digits and dots", got)
		}
		found := false
		for _, line := range strings.Split(content, "\n") {
			if strings.HasPrefix(line, "NVRM version:") && strings.Contains(" "+strings.Join(strings.Fields(line), " ")+" ", " "+got+" ") {
				found = true
			}
		}
		if !found {
			t.Fatalf("version %q is no word of an NVRM line of %q", got, content)
		}
	})
}

// FuzzContainerRoot feeds any OCI state (where @BUNDLE@ stands for a real
// bundle directory) and config.json to ContainerRoot: a root it returns is
// absolute and clean, root.path itself when that is absolute.
func FuzzContainerRoot(f *testing.F) {
	state := `{"ociVersion":"1.0.2","id":"c1","status":"creating","pid":1,"bundle":"@BUNDLE@"}`
	f.Add(state, `{"ociVersion":"1.0.2","root":{"path":"rootfs"}}`)
	f.Add(state, `{"root":{"path":"/var/lib/containers/c1/merged","readonly":true}}`)
	f.Add(state, `{"root":{"path":"../../x"}}`)
	f.Add(state, `{"root":{}}`)
	f.Add(state, `{"root":"rootfs"}`)
	f.Add(`{"bundle":""}`, `{}`)
	f.Add(`{"bundle":"@BUNDLE@"} trailing`, `{"root":{"path":"r"}}`)
	f.Add(`[]`, `null`)
	bundle := f.TempDir()
	f.Fuzz(func(t *testing.T, state, config string) {
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := ContainerRoot(strings.NewReader(strings.ReplaceAll(state, "@BUNDLE@", bundle)))
		if err != nil {
			return
		}
		if !filepath.IsAbs(got) || filepath.Clean(got) != got {
			t.Fatalf("root %q is not absolute and clean", got)
		}
		var cfg struct {
			Root struct {
				Path string `json:"path"`
			} `json:"root"`
		}
		if json.Unmarshal([]byte(config), &cfg) == nil && filepath.IsAbs(cfg.Root.Path) && got != filepath.Clean(cfg.Root.Path) {
			t.Fatalf("root %q, want root.path %q", got, cfg.Root.Path)
		}
	})
}
