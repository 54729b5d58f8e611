package assemble

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kpreload/kpreload/initramfs/archive"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// TestCacheSetSupportedGPUs: a cache set with a supported-gpus.json brings
// the file into the initramfs next to its modules, and the initramfs's boot
// index names it relative to the set's Dir.
func TestCacheSetSupportedGPUs(t *testing.T) {
	kver := "6.1.0-56-cloud-amd64"
	tree := filepath.Join(kernelRoot(t, kver), "lib/modules", kver)
	dir := t.TempDir()
	gpus := filepath.Join(dir, "in.json")
	data := []byte(`{"chips":[{"devid":"0x2335","name":"NVIDIA H200"}]}`)
	if err := os.WriteFile(gpus, data, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(filepath.Join(dir, "cache"))
	if err != nil {
		t.Fatal(err)
	}
	_, id, err := s.AddFiles(context.Background(), store.AddRequest{
		Driver: "dummy", Version: "1", Files: []string{filepath.Join(tree, "kernel/drivers/net/dummy.ko")}, SupportedGPUs: gpus,
	})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	res, err := Build(Options{Kernel: kver, ModulesDir: tree, Init: fakeInit(t), CacheDir: s.Dir(), Compression: archive.None}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cmd := exec.Command("cpio", "-idm", "--quiet", "--no-absolute-filenames")
	cmd.Dir, cmd.Stdin = out, &buf
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio: %v\n%s", err, b)
	}
	ix, err := bootindex.Read(filepath.Join(out, "lib/modules", kver, "kpreload.index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, set := range ix.Sets {
		if set.ID != id {
			continue
		}
		found = true
		if set.SupportedGPUs != manifest.SupportedGPUsFile {
			t.Errorf("set supported_gpus = %q, want %q", set.SupportedGPUs, manifest.SupportedGPUsFile)
		}
		p := filepath.Join(out, "lib/modules", kver, set.Dir, set.SupportedGPUs)
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s = %q (%v), want %q", p, got, err, data)
		}
		if len(res.SupportedGPUs) != 1 {
			t.Errorf("Result.SupportedGPUs = %v, want one path", res.SupportedGPUs)
		}
	}
	if !found {
		t.Fatalf("initramfs index has no set %s: %+v", id, ix.Sets)
	}
}
