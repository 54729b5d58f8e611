package modalias

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// writeTree writes the given index files into a new modules directory.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// smallTree is a hand-written tree in depmod's formats.
var smallTree = map[string]string{
	"modules.dep": `kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/fs/fat/vfat.ko: kernel/fs/fat/fat.ko
kernel/fs/fat/fat.ko:
kernel/drivers/net/dummy-net.ko:
`,
	"modules.alias": `# Aliases extracted from modules themselves.
alias virtio:d00000002v* virtio_blk
alias fs-vfat vfat
alias dummy-[a-c]-x dummy_net
`,
	"modules.softdep": `# Soft dependencies extracted from modules themselves.
softdep vfat pre: nls-cp437 \
	post: fat
softdep virtio_blk ignored-word
`,
	"modules.builtin":         "kernel/fs/nls/nls_cp437.ko\nkernel/drivers/nvme/host/nvme-core.ko\n",
	"modules.builtin.modinfo": "nls_cp437.alias=nls-cp437\x00nls_cp437.license=GPL\x00printk.time=bool\x00debugfs.alias=fs-debugfs\x00",
}

func TestLoadTreeSmall(t *testing.T) {
	tree, err := LoadTree(writeTree(t, smallTree))
	if err != nil {
		t.Fatalf("LoadTree: %v", err)
	}
	wantNames := []string{"dummy_net", "fat", "nls_cp437", "nvme_core", "vfat", "virtio", "virtio_blk", "virtio_ring"}
	if got := tree.Names(); !reflect.DeepEqual(got, wantNames) {
		t.Errorf("Names() = %q, want %q", got, wantNames)
	}
	if got, want := tree.Deps("virtio-blk"), []string{"virtio", "virtio_ring"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Deps(virtio-blk) = %q, want %q", got, want)
	}
	modules := []struct {
		name string
		want Module
		ok   bool
	}{
		{"virtio_blk", Module{Name: "virtio_blk", Path: "kernel/drivers/block/virtio_blk.ko"}, true},
		{"dummy-net", Module{Name: "dummy_net", Path: "kernel/drivers/net/dummy-net.ko"}, true},
		{"nvme-core", Module{Name: "nvme_core", Builtin: true}, true},
		{"debugfs", Module{Name: "debugfs", Builtin: true}, true}, // built-in code known by its aliases
		{"printk", Module{}, false}, // only a parameter in modules.builtin.modinfo
		{"nosuch", Module{}, false},
	}
	for _, c := range modules {
		got, ok := tree.Module(c.name)
		if got != c.want || ok != c.ok {
			t.Errorf("Module(%q) = %v, %v; want %v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
	if !tree.Builtin("nls_cp437") || tree.Builtin("vfat") || tree.Builtin("nosuch") {
		t.Errorf("Builtin(nls_cp437, vfat, nosuch) = %v, %v, %v; want true, false, false",
			tree.Builtin("nls_cp437"), tree.Builtin("vfat"), tree.Builtin("nosuch"))
	}
	pre, post := tree.Softdeps("vfat")
	if !reflect.DeepEqual(pre, []string{"nls-cp437"}) || !reflect.DeepEqual(post, []string{"fat"}) {
		t.Errorf("Softdeps(vfat) = %q, %q; want [nls-cp437], [fat]", pre, post)
	}
	resolves := []struct {
		in   string
		want []string
	}{
		{"virtio:d00000002v00001AF4", []string{"virtio_blk"}},
		{"virtio-blk", []string{"virtio_blk"}}, // a module name, '-' normalised
		{"fs-vfat", []string{"vfat"}},
		{"dummy-b-x", []string{"dummy_net"}}, // '-' normalised outside brackets only
		{"nvme-core", []string{"nvme_core"}}, // built-in by name
		{"nls-cp437", []string{"nls_cp437"}}, // built-in by alias
		{"fs-debugfs", []string{"debugfs"}},
		{"virtio:d00000001v00001AF4", nil},
		{"bad]", nil},
		{"", nil},
	}
	for _, c := range resolves {
		if got := tree.Resolve(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Resolve(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	order, err := tree.LoadOrder("vfat", "virtio_blk")
	if err != nil {
		t.Fatalf("LoadOrder: %v", err)
	}
	// Dependencies first, then the module between its pre: and post: softdeps.
	wantOrder := []Module{
		{Name: "fat", Path: "kernel/fs/fat/fat.ko"},
		{Name: "nls_cp437", Builtin: true},
		{Name: "vfat", Path: "kernel/fs/fat/vfat.ko"},
		{Name: "virtio_ring", Path: "kernel/drivers/virtio/virtio_ring.ko"},
		{Name: "virtio", Path: "kernel/drivers/virtio/virtio.ko"},
		{Name: "virtio_blk", Path: "kernel/drivers/block/virtio_blk.ko"},
	}
	if !reflect.DeepEqual(order, wantOrder) {
		t.Errorf("LoadOrder(vfat, virtio_blk) =\n  %v\nwant\n  %v", order, wantOrder)
	}
	if got := tree.LoadOrderFor("fs-vfat"); !reflect.DeepEqual(got, wantOrder[:3]) {
		t.Errorf("LoadOrderFor(fs-vfat) = %v, want %v", got, wantOrder[:3])
	}
}

func TestLoadOrderUnknownModule(t *testing.T) {
	tree, err := LoadTree(writeTree(t, smallTree))
	if err != nil {
		t.Fatalf("LoadTree: %v", err)
	}
	cases := []struct {
		name    string
		suggest string
	}{
		{"virtio_blkk", "virtio_blk"},
		{"vfta", "vfat"},
		{"virtio", ""}, // known: no error
	}
	for _, c := range cases {
		_, err := tree.LoadOrder("fat", c.name)
		if c.suggest == "" {
			if err != nil {
				t.Errorf("LoadOrder(fat, %q) = %v, want no error", c.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.name) || !strings.Contains(err.Error(), "did you mean") || !strings.Contains(err.Error(), c.suggest) {
			t.Errorf("LoadOrder(fat, %q) error = %v, want one naming %q and suggesting %q", c.name, err, c.name, c.suggest)
		}
	}
}

func TestLoadTreeErrors(t *testing.T) {
	cases := []struct {
		name    string
		files   map[string]string
		wantErr string // substring: the file and line
	}{
		{"no modules.dep", map[string]string{"modules.alias": ""}, "run depmod"},
		{"dep without colon", map[string]string{"modules.dep": "a.ko:\nkernel/b.ko kernel/a.ko\n"}, "modules.dep:2:"},
		{"dep listed twice", map[string]string{"modules.dep": "a.ko:\nb.ko:\nx/a.ko:\n"}, "modules.dep:3: module a listed twice"},
		{"alias too short", map[string]string{"modules.dep": "a.ko:\n", "modules.alias": "# c\nalias a\n"}, "modules.alias:2:"},
		{"alias wrong keyword", map[string]string{"modules.dep": "a.ko:\n", "modules.alias": "alias x a\nalais y a\n"}, "modules.alias:2:"},
		{"softdep unknown command", map[string]string{"modules.dep": "a.ko:\n", "modules.softdep": "softdep a pre: b\noptions a x=1\n"}, "modules.softdep:2:"},
		{"softdep without deps", map[string]string{"modules.dep": "a.ko:\n", "modules.softdep": "# c\n\nsoftdep a\n"}, "modules.softdep:3:"},
		{"softdep line number after continuation", map[string]string{"modules.dep": "a.ko:\n", "modules.softdep": "softdep a pre: \\\n b\nsoftdep\n"}, "modules.softdep:3:"},
		{"builtin with spaces", map[string]string{"modules.dep": "a.ko:\n", "modules.builtin": "kernel/x.ko\nkernel/y.ko kernel/z.ko\n"}, "modules.builtin:2:"},
		{"modinfo without key", map[string]string{"modules.dep": "a.ko:\n", "modules.builtin.modinfo": "x.alias=y\x00garbage\x00"}, "modules.builtin.modinfo: entry 2:"},
	}
	for _, c := range cases {
		dir := writeTree(t, c.files)
		_, err := LoadTree(dir)
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: LoadTree error = %v, want one containing %q", c.name, err, c.wantErr)
			continue
		}
		if c.wantErr != "run depmod" && !strings.Contains(err.Error(), dir) {
			t.Errorf("%s: LoadTree error = %v, want it to name the file under %s", c.name, err, dir)
		}
	}
}

func TestNormalizeAlias(t *testing.T) {
	cases := []struct {
		in   string
		want string
		ok   bool
	}{
		{"virtio-blk", "virtio_blk", true},
		{"scsi:t-0x0[0-5]*", "scsi:t_0x0[0-5]*", true},
		{"a[-]-b", "a[-]_b", true},
		{"a]b", "", false},
		{"a[b", "", false},
		{"pci:v00001AF4d*", "pci:v00001AF4d*", true},
		{strings.Repeat("x", 5000), strings.Repeat("x", pathMax-1), true},
	}
	for _, c := range cases {
		got, ok := normalizeAlias(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("normalizeAlias(%.40q) = %.40q, %v; want %.40q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestSubtreeLess(t *testing.T) {
	// kmod's walk: children in byte order, a node's own values after them.
	cases := []struct {
		a, b string
		want bool
	}{
		{"*a", "*b", true},
		{"*b", "*a", false},
		{"*ab", "*a", true}, // the longer pattern's node is a child of the shorter's
		{"*a", "*ab", false},
	}
	for _, c := range cases {
		if got := subtreeLess(c.a, c.b); got != c.want {
			t.Errorf("subtreeLess(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
