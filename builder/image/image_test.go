package image

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/kmodcache/remote"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

func TestImageCmdlineFor(t *testing.T) {
	if got, want := ImageCmdlineFor("u-u-i-d", " console=ttyS0 "), "root=UUID=u-u-i-d rw console=ttyS0"; got != want {
		t.Errorf("ImageCmdlineFor = %q, want %q", got, want)
	}
	if got, want := ImageCmdlineFor("x", ""), "root=UUID=x rw"; got != want {
		t.Errorf("ImageCmdlineFor = %q, want %q", got, want)
	}
}

func TestRootfsKey(t *testing.T) {
	o := Options{Kernels: []string{"6.1.0-56-cloud-amd64"}}.withDefaults()
	base := rootfsSpec(o, "2025-01-01")
	if !slices.Contains(base.Packages, "linux-image-6.1.0-56-cloud-amd64") || !slices.Contains(base.Packages, "systemd-sysv") {
		t.Fatalf("packages = %v, want the kernel and systemd-sysv", base.Packages)
	}
	k := RootfsKey(base)
	if RootfsKey(rootfsSpec(o, "2025-01-01")) != k {
		t.Error("same inputs gave different keys")
	}
	o2 := o
	o2.Packages = []string{"curl"}
	o3 := o
	o3.Mirror = "http://example.org/debian"
	for name, spec := range map[string]RootfsSpec{
		"another day":     rootfsSpec(o, "2025-01-02"),
		"another package": rootfsSpec(o2, "2025-01-01"),
		"another mirror":  rootfsSpec(o3, "2025-01-01"),
	} {
		if RootfsKey(spec) == k {
			t.Errorf("%s: key unchanged", name)
		}
	}
	args := mmdebstrapArgs(base, "/tmp/x/kpreload-initramfs-tool.deb", "/out.tar")
	joined := strings.Join(args, "\n")
	for _, want := range []string{"--variant=minbase", "linux-image-6.1.0-56-cloud-amd64", "/tmp/x/kpreload-initramfs-tool.deb", "bookworm-backports", "bookworm-security", "/out.tar"} {
		if !strings.Contains(joined, want) {
			t.Errorf("mmdebstrap args lack %q:\n%s", want, joined)
		}
	}
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	good := Options{Name: "ci", OutDir: dir, Kernels: []string{"6.1.0-56-cloud-amd64"}, KpreloadBinary: bin, InitBinary: bin}
	if err := good.Validate(); err != nil {
		t.Fatalf("good options: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"bad name", func(o *Options) { o.Name = "a/b" }, `name "a/b"`},
		{"no out", func(o *Options) { o.OutDir = "" }, "no output directory"},
		{"no kernels", func(o *Options) { o.Kernels = nil }, "no kernels"},
		{"bad kernel", func(o *Options) { o.Kernels = []string{"linux; rm"} }, "not a kernel release"},
		{"twice", func(o *Options) { o.Kernels = []string{"6.1", "6.1"} }, "given twice"},
		{"format", func(o *Options) { o.Formats = []string{"vpc"} }, `format "vpc": want one of raw, qcow2, vhd, vmdk, gce`},
		{"format twice", func(o *Options) { o.Formats = []string{"vmdk", "vmdk"} }, "format vmdk given twice"},
		{"small", func(o *Options) { o.SizeMB = 300 }, "disk size 300 MiB"},
		{"no init", func(o *Options) { o.InitBinary = filepath.Join(dir, "nope") }, "/init binary"},
		{"no kpreload", func(o *Options) { o.KpreloadBinary = "" }, "no kpreload binary"},
		{"instance", func(o *Options) { o.Instance = filepath.Join(dir, "nope.yaml") }, "instance file"},
		{"cmdline", func(o *Options) { o.Cmdline = "a\nb" }, "one line"},
		{"cmdline with root=", func(o *Options) { o.Cmdline = "console=ttyS0 root=/dev/sda1" }, `cmdline "root=/dev/sda1": the image names its root itself`},
		{"package", func(o *Options) { o.Packages = []string{"a b"} }, `package "a b"`},
		{"initramfs-tools", func(o *Options) { o.Packages = []string{"htop", "initramfs-tools"} }, "package initramfs-tools: kpreload's images make their own initramfs"},
		{"dracut, pinned", func(o *Options) { o.Packages = []string{"dracut=059-4"} }, "package dracut: kpreload's images make their own initramfs"},
		{"tiny-initramfs", func(o *Options) { o.Packages = []string{"tiny-initramfs"} }, "--plain --bootloader grub"},
		{"dracut in a plain image", func(o *Options) {
			o.Plain, o.Bootloader, o.Recipes, o.Packages = true, install.GRUB, nil, []string{"dracut"}
		}, "package dracut: a plain image uses Debian's initramfs-tools"},
	} {
		o := good
		c.edit(&o)
		err := o.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate() = %v, want an error containing %q", c.name, err, c.want)
		}
	}
	// Every problem at once.
	err := Options{}.Validate()
	for _, want := range []string{"name", "no output directory", "no kernels", "no kpreload binary", "no /init binary"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Options{}.Validate() = %v, want it to mention %q", err, want)
		}
	}
}

func TestCheckKernels(t *testing.T) {
	lister := recipe.ListerFunc(func() ([]string, error) {
		return []string{"6.1.0-55-cloud-amd64", "6.1.0-56-cloud-amd64"}, nil
	})
	r := &recipe.Recipe{Name: "testdriver", File: "recipes/testdriver.yaml", Kernels: recipe.Matrix{Releases: []string{"6.1.0-56-cloud-amd64"}}}
	if err := CheckKernels([]string{"6.1.0-56-cloud-amd64"}, []*recipe.Recipe{r}, lister, true, ""); err != nil {
		t.Errorf("known kernel: %v", err)
	}
	err := CheckKernels([]string{"6.1.0-99-cloud-amd64"}, nil, lister, false, "")
	if !errors.Is(err, ErrUnknownKernel) || !strings.Contains(err.Error(), "available: 6.1.0-55-cloud-amd64, 6.1.0-56-cloud-amd64") {
		t.Errorf("unknown kernel: err = %v, want ErrUnknownKernel listing the available kernels", err)
	}
	err = CheckKernels([]string{"6.1.0-55-cloud-amd64"}, []*recipe.Recipe{r}, lister, true, "")
	if !errors.Is(err, ErrUnknownKernel) || !strings.Contains(err.Error(), "not in the kernel matrix of recipe testdriver") || !strings.Contains(err.Error(), "6.1.0-56-cloud-amd64") {
		t.Errorf("kernel outside the matrix: err = %v, want it named with the matrix", err)
	}
	if err := CheckKernels([]string{"6.1.0-55-cloud-amd64"}, []*recipe.Recipe{r}, lister, false, ""); err != nil {
		t.Errorf("kernel outside the matrix, cached cells only: %v", err)
	}
}

// realModule returns a small real module of the unpacked 6.1 kernel.
func realModule(t *testing.T) (kver, path string) {
	t.Helper()
	kver = testKernel
	path = filepath.Join(testenv.KernelTree(t, kver), "lib", "modules", kver, "kernel", "drivers", "misc", "pvpanic", "pvpanic.ko")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("kernel %s is not unpacked (%v): run scripts/kernels.sh %s", kver, err, kver)
	}
	return kver, path
}

func TestResolveCellsMissing(t *testing.T) {
	ctx := context.Background()
	cacheDir := t.TempDir()
	r := &recipe.Recipe{Name: "testdriver", Driver: recipe.Driver{Name: "kpreload-edu", Version: "1.0.0"}, Flavor: "open"}

	_, err := resolveCells(ctx, cacheDir, "", []*recipe.Recipe{r}, []string{"6.1.0-56-cloud-amd64"}, false, nil, nil, nil)
	if !errors.Is(err, ErrMissingCells) || !strings.Contains(err.Error(), "holds: nothing") || !strings.Contains(err.Error(), "testdriver (kpreload-edu 1.0.0 open) for 6.1.0-56-cloud-amd64") {
		t.Errorf("empty cache: err = %v, want ErrMissingCells naming the cell and an empty cache", err)
	}

	kver, mod := realModule(t)
	st, err := store.Open(cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.AddFiles(ctx, store.AddRequest{Driver: "kpreload-edu", Version: "1.0.0", Flavor: "open", Files: []string{mod}}); err != nil {
		t.Fatal(err)
	}
	cells, err := resolveCells(ctx, cacheDir, "", []*recipe.Recipe{r}, []string{kver}, false, nil, nil, nil)
	if err != nil || len(cells) != 1 || cells[0].kernel != kver || cells[0].m.Driver != "kpreload-edu" {
		t.Fatalf("cached cell: cells %+v, err %v; want the one set", cells, err)
	}
	_, err = resolveCells(ctx, cacheDir, "", []*recipe.Recipe{r}, []string{kver, "6.12.117+deb12-cloud-amd64"}, false, nil, nil, nil)
	if !errors.Is(err, ErrMissingCells) || !strings.Contains(err.Error(), "for 6.12.117+deb12-cloud-amd64") || !strings.Contains(err.Error(), "holds: kpreload-edu 1.0.0 open for "+kver) {
		t.Errorf("one cell missing: err = %v, want the 6.12 cell named and the cache's 6.1 set listed", err)
	}
}

// TestResolveCellsFromRemote builds the test driver with the real dkms and
// pushes it to a real registry; an image's cell lookup with an empty module
// cache then pulls exactly that cell (by its content key) instead of failing
// or building, and without the remote the same lookup is a missing cell.
func TestResolveCellsFromRemote(t *testing.T) {
	if testing.Short() {
		t.Skip("real dkms build and registry: skipped with -short")
	}
	ctx := context.Background()
	reg := testenv.StartRegistry(t)
	rm, err := remote.Open("oci://"+reg.Addr+"/images", remote.Options{PlainHTTP: true, DockerConfig: filepath.Join(t.TempDir(), "none.json")})
	if err != nil {
		t.Fatal(err)
	}
	r, err := recipe.Load(filepath.Join(testenv.RepoRoot(t), "recipes", "testdriver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kver := testKernel
	testenv.KernelTree(t, kver)
	built, err := matrix.Run(ctx, matrix.Options{Recipes: []*recipe.Recipe{r}, Kernels: []string{kver}, CacheDir: t.TempDir(), Remote: rm})
	if err != nil || len(built) != 1 || built[0].Remote != "pushed" {
		t.Fatalf("build and push: %+v, %v", built, err)
	}
	empty := t.TempDir()
	if _, err := resolveCells(ctx, empty, "", []*recipe.Recipe{r}, []string{kver}, false, nil, nil, nil); !errors.Is(err, ErrMissingCells) {
		t.Fatalf("without the remote: %v, want ErrMissingCells", err)
	}
	var said []string
	cells, err := resolveCells(ctx, empty, "", []*recipe.Recipe{r}, []string{kver}, false, rm, nil, func(s string) { said = append(said, s) })
	if err != nil {
		t.Fatalf("with the remote: %v", err)
	}
	if len(cells) != 1 || cells[0].id != built[0].SetID {
		t.Errorf("cells %+v, want the pushed set %s", cells, built[0].SetID)
	}
	if !slices.ContainsFunc(said, func(s string) bool { return strings.Contains(s, "pulled") }) {
		t.Errorf("progress %q does not say the cell was pulled", said)
	}
}

func TestOutputPath(t *testing.T) {
	for _, c := range []struct{ format, file string }{
		{FormatRaw, "ci.raw"}, {FormatGCE, "ci.tar.gz"}, {"manifest.json", "ci.manifest.json"},
	} {
		if got, want := OutputPath("/out", "ci", c.format), "/out/"+c.file; got != want {
			t.Errorf("OutputPath(/out, ci, %s) = %q, want %q", c.format, got, want)
		}
	}
}
