package matchcmd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
	"github.com/kpreload/kpreload/testsupport/treetest"
)

// TestMatchSmallTree: kpreload match over a small module tree's indexes:
// modules, the load order, JSON, and what it refuses.
func TestMatchSmallTree(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "lib/modules/6.1.0-small")
	treetest.Write(t, dir, map[string]string{
		"modules.dep": "kernel/drivers/virtio/virtio_ring.ko:\n" +
			"kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko\n" +
			"kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko\n",
		"modules.alias":   "alias virtio:d00000002v* virtio_blk\n",
		"modules.builtin": "kernel/fs/nls/nls_cp437.ko\n",
	})
	for _, tt := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"modalias", []string{"--modules-dir", dir, "virtio:d00000002v00001AF4"}, 0, "virtio_blk\n"},
		{"twice, by --modalias", []string{"--kernel", "6.1.0-small", "--root", root, "--modalias", "virtio:d00000002v00001AF4", "virtio_blk"}, 0, "virtio_blk\n"},
		{"load order", []string{"--modules-dir", dir, "--load-order", "virtio:d00000002v00001AF4", "nls_cp437"}, 0,
			"insmod " + dir + "/kernel/drivers/virtio/virtio_ring.ko\n" +
				"insmod " + dir + "/kernel/drivers/virtio/virtio.ko\n" +
				"insmod " + dir + "/kernel/drivers/block/virtio_blk.ko\n" +
				"builtin nls_cp437\n"},
		{"no match", []string{"--modules-dir", dir, "pci:v0000FFFFd*"}, 1, ""},
		{"no modalias", []string{"--modules-dir", dir}, 1, ""},
		{"both trees", []string{"--modules-dir", dir, "--kernel", "6.1.0-small", "x"}, 1, ""},
		{"no tree", []string{"x"}, 1, ""},
		{"a path as kernel", []string{"--kernel", "../6.1.0-small", "x"}, 1, ""},
		{"absent tree", []string{"--modules-dir", filepath.Join(root, "absent"), "x"}, 1, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCLI(append([]string{"match"}, tt.args...)...)
			if code != tt.code || tt.code == 0 && out != tt.want || tt.code != 0 && errOut == "" {
				t.Errorf("match %q = exit %d, stdout %q, stderr %q; want exit %d, stdout %q", tt.args, code, out, errOut, tt.code, tt.want)
			}
		})
	}
	code, out, _ := runCLI("match", "--json", "--modules-dir", dir, "--load-order", "virtio:d00000002v00001AF4", "pci:v0000FFFFd*")
	var got matchResult
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil {
		t.Fatalf("match --json = exit %d, %q, %v", code, out, err)
	}
	if len(got.Lookups) != 2 || len(got.Modules) != 1 || got.Modules[0] != "virtio_blk" || len(got.LoadOrder) != 3 || got.ModulesDir != dir {
		t.Errorf("match --json = %+v, want 2 lookups, the module virtio_blk, 3 modules to load, the tree %s", got, dir)
	}
}

// TestMatchHelpExamples runs the examples of `kpreload match --help` exactly
// as written, where the kernel `kpreload kernels fetch` unpacked is linked as
// ./6.1.0-56-cloud-amd64, as the help says.
func TestMatchHelpExamples(t *testing.T) {
	const kver = "6.1.0-56-cloud-amd64"
	// As the help says: the tree kernels fetch unpacked, linked into the
	// working directory under its release's name.
	tree := testenv.KernelTree(t, kver)
	t.Chdir(t.TempDir())
	if err := os.Symlink(tree, kver); err != nil {
		t.Fatal(err)
	}
	lines := cli.ExamplesOf(t, "kpreload match")
	if len(lines) != 2 {
		t.Fatalf("match examples: %q, want two", lines)
	}
	if out := cli.RunLine(t, lines[0]); out != "virtio_pci\n" {
		t.Errorf("%s printed %q, want virtio_pci", lines[0], out)
	}
	out := cli.RunLine(t, lines[1])
	var mods []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		mods = append(mods, strings.TrimSuffix(filepath.Base(l), ".ko"))
	}
	if strings.Join(mods, " ") != "virtio_ring virtio virtio_blk" || !strings.HasPrefix(out, "insmod "+kver+"/lib/modules/") {
		t.Errorf("%s printed\n%s\nwant insmod of virtio_ring, virtio, virtio_blk in that order", lines[1], out)
	}
}
