package install

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/kmodcache/cellsign"
	"github.com/kpreload/kpreload/kmodcache/remote"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// cellHook is what the tests of a hook that pulls cells share: a real
// registry taking cells signed by a builder key, the testdriver recipe, the
// trees of testKernel and a newer kernel, and a cache to build cells in.
type cellHook struct {
	newer string         // the newer kernel's release
	keys  string         // the folder of builder.key and builder.pub
	url   string         // the registry's oci:// URL
	rm    *remote.Remote // the registry, pushing signed by builder.key
	r     *recipe.Recipe // the testdriver recipe
	ktree string         // the newer kernel's tree
	built string         // the cache the cells are in (built once: copyBuiltCells)
}

// newCellHook starts the registry, unpacks the kernels for newer and puts
// the testdriver cells of testKernel and newer into h.built.
func newCellHook(t *testing.T, newer string) *cellHook {
	t.Helper()
	h := &cellHook{newer: newer, keys: t.TempDir(), built: t.TempDir()}
	signer, err := cellsign.Generate(filepath.Join(h.keys, "builder.key"), filepath.Join(h.keys, "builder.pub"))
	if err != nil {
		t.Fatal(err)
	}
	reg := testenv.StartRegistry(t)
	h.url = "oci://" + reg.Addr + "/cells"
	if h.rm, err = remote.Open(h.url, remote.Options{PlainHTTP: true, DockerConfig: filepath.Join(t.TempDir(), "none.json"), Signer: signer}); err != nil {
		t.Fatal(err)
	}
	if h.r, err = recipe.Load(filepath.Join(testenv.RepoRoot(t), "recipes", "testdriver.yaml")); err != nil {
		t.Fatal(err)
	}
	testenv.KernelTree(t, testKernel)
	h.ktree = testenv.KernelTree(t, newer)
	copyBuiltCells(t, h.r, newer, h.built)
	return h
}

// root makes a root with testKernel (its kpreload initramfs and the cells
// of set oldSet) and the newer kernel (its image and modules, no
// initramfs), systemd-boot, the builder's public key and the files of extra.
func (h *cellHook) root(t *testing.T, oldSet string, extra map[string]string) string {
	t.Helper()
	vmlinuz, err := os.ReadFile(filepath.Join(h.ktree, "boot", "vmlinuz-"+h.newer))
	if err != nil {
		t.Fatal(err)
	}
	init, err := os.ReadFile(testInit(t))
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := os.ReadFile(filepath.Join(h.keys, "builder.pub"))
	files := map[string]string{
		"boot/vmlinuz-" + h.newer: string(vmlinuz), Init: string(init), Cmdline: "root=UUID=x rw\n",
		"boot/vmlinuz-" + testKernel: "6.1 kernel", InitramfsPath(testKernel): "6.1 initramfs",
		"boot/efi/loader/": "", "lib/modules/": "",
		"etc/kpreload/keys/builder.pub": string(pub),
	}
	for name, text := range extra {
		files[name] = text
	}
	root := fakeRoot(t, files)
	// A copy, not a link out of the root: the hook resolves every path
	// inside the root, as a chroot would.
	copyTree(t, filepath.Join(h.ktree, "lib/modules", h.newer), filepath.Join(root, "lib/modules", h.newer))
	from, err := store.Open(h.built)
	if err != nil {
		t.Fatal(err)
	}
	to, err := store.Open(filepath.Join(root, CacheDir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := from.CopySet(context.Background(), to, oldSet); err != nil {
		t.Fatal(err)
	}
	return root
}
