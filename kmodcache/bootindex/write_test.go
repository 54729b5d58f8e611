package bootindex

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "6.1.0-56-cloud-amd64.json")
	ix := &Index{Format: FormatVersion, Kernel: "6.1.0-56-cloud-amd64", Sets: []Set{{
		ID: "kernel", Dir: "../objects/sha256",
		Modules: []Module{{Name: "virtio_net", Path: "bb/bb88", SHA256: "bb88", Size: 10, Vermagic: "6.1.0-56-cloud-amd64 SMP", Depends: []string{"net_failover"}}},
	}}}
	for i := 0; i < 2; i++ { // the second write replaces the first
		if err := Write(path, ix); err != nil {
			t.Fatalf("Write(%s) error = %v", path, err)
		}
	}
	got, err := Read(path)
	if err != nil {
		t.Fatalf("Read(%s) error = %v", path, err)
	}
	if !reflect.DeepEqual(got, ix) {
		t.Errorf("Read(Write(ix)) = %+v, want %+v", got, ix)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("directory after Write holds %d entries, want only the index (no temp files)", len(ents))
	}
	if err := Write(filepath.Join(dir, "missing", "x.json"), ix); err == nil {
		t.Errorf("Write(into a missing directory) = nil error, want one")
	}
}

func TestPath(t *testing.T) {
	for _, tt := range []struct{ cache, kernel, want string }{
		{"/var/lib/kpreload/cache", "6.1.0-56-cloud-amd64", "/var/lib/kpreload/cache/index/6.1.0-56-cloud-amd64.json"},
		{"/newroot/" + RootCacheDir, "6.12.117+deb12-cloud-amd64", "/newroot/var/lib/kpreload/cache/index/6.12.117+deb12-cloud-amd64.json"},
		{"cache/", "k", "cache/index/k.json"},
	} {
		if got := Path(tt.cache, tt.kernel); got != tt.want {
			t.Errorf("Path(%q, %q) = %q, want %q", tt.cache, tt.kernel, got, tt.want)
		}
	}
}
