package kpreloadbuilder

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/image"
	"github.com/kpreload/kpreload/builder/packer-plugin-kpreload/internal/pkrcfg"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/kmodcache/cellsign"
)

// recipesDir is the repository's recipes directory.
const recipesDir = "../../../recipes"

// fakeKernels replaces the apt-backed kernel lister for the test.
func fakeKernels(t *testing.T, rels ...string) {
	t.Helper()
	old := pkrcfg.Lister
	pkrcfg.Lister = recipe.StaticLister{Default: rels}
	t.Cleanup(func() { pkrcfg.Lister = old })
}

// baseRaw is a valid raw configuration (as Packer passes it after HCL
// decoding) with its binaries in a temporary directory.
func baseRaw(t *testing.T) map[string]interface{} {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"kpreload", "kpreload-init"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/false\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return map[string]interface{}{
		"packer_build_name": "ci",
		"kernels":           []string{"6.1.0-56-cloud-amd64"},
		"recipes":           []string{"testdriver"},
		"recipes_dir":       recipesDir,
		"output_directory":  filepath.Join(dir, "out"),
		"cache_dir":         filepath.Join(dir, "cache"),
		"kpreload_binary":   filepath.Join(dir, "kpreload"),
		"init_binary":       filepath.Join(dir, "kpreload-init"),
	}
}

func TestPrepareDefaults(t *testing.T) {
	fakeKernels(t, "6.1.0-56-cloud-amd64")
	raw := baseRaw(t)
	raw["disk_size"] = "3G"
	raw["kernel_cmdline"] = "console=ttyS0"
	var c Config
	warns, err := c.Prepare(raw)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if len(warns) != 0 {
		t.Errorf("warnings = %q, want none", warns)
	}
	o := c.Options()
	if got, want := o.Name, "ci"; got != want {
		t.Errorf("Name = %q, want %q (the build's name)", got, want)
	}
	if got, want := o.Disk.SizeMB, 3072; got != want {
		t.Errorf("SizeMB = %d, want %d", got, want)
	}
	if !o.Stage.BuildMissing {
		t.Errorf("BuildMissing = false, want true by default")
	}
	if got, want := len(o.Stage.Recipes), 1; got != want {
		t.Fatalf("%d recipes, want %d", got, want)
	}
	if got, want := o.Stage.Recipes[0].Name, "testdriver"; got != want {
		t.Errorf("recipe = %q, want %q", got, want)
	}
	if got, want := o.Boot.Cmdline, "console=ttyS0"; got != want {
		t.Errorf("Cmdline = %q, want %q", got, want)
	}
}

func TestPrepareBuildMissingFalse(t *testing.T) {
	raw := baseRaw(t)
	raw["build_missing"] = false
	var c Config
	if _, err := c.Prepare(raw); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if c.Options().Stage.BuildMissing {
		t.Errorf("BuildMissing = true, want false as configured")
	}
}

func TestPrepareRecipeByPath(t *testing.T) {
	raw := baseRaw(t)
	raw["recipes"] = []string{filepath.Join(recipesDir, "testdriver.yaml")}
	raw["recipes_dir"] = t.TempDir() // unused for paths
	var c Config
	if _, err := c.Prepare(raw); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if got, want := c.LoadedRecipes()[0].Name, "testdriver"; got != want {
		t.Errorf("recipe = %q, want %q", got, want)
	}
}

// TestPrepareSelector checks kernels picked by a recipe's selector (the
// nvidia-535 recipe takes the newest 6.1 cloud kernel).
func TestPrepareSelector(t *testing.T) {
	fakeKernels(t, "6.1.0-40-cloud-amd64", "6.1.0-56-cloud-amd64", "6.1.0-57-cloud-amd64", "6.12.117+deb12-cloud-amd64")
	tests := []struct {
		kernel  string
		wantErr string
	}{
		{"6.1.0-57-cloud-amd64", ""},
		{"6.1.0-56-cloud-amd64", ""}, // named in releases
		{"6.1.0-40-cloud-amd64", "selected today: 6.1.0-57-cloud-amd64"},
	}
	for _, tt := range tests {
		t.Run(tt.kernel, func(t *testing.T) {
			raw := baseRaw(t)
			raw["recipes"] = []string{"nvidia-535"}
			raw["kernels"] = []string{tt.kernel}
			var c Config
			_, err := c.Prepare(raw)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Prepare: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Prepare error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestPrepareAllProblems checks that Prepare reports every problem of a bad
// configuration at once, each saying what would be right.
func TestPrepareAllProblems(t *testing.T) {
	fakeKernels(t, "6.1.0-56-cloud-amd64")
	raw := baseRaw(t)
	out := raw["output_directory"].(string)
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	raw["recipes"] = []string{"nosuch", "testdriver"}
	raw["kernels"] = []string{"6.1.0-99-cloud-amd64"}
	raw["disk_size"] = "4Q"
	raw["formats"] = []string{"vmdk", "vpc"}
	raw["instance_file"] = filepath.Join(t.TempDir(), "missing.yaml")
	raw["packages"] = []string{"initramfs-tools"}
	raw["kernel_cmdline"] = "console=ttyS0 root=/dev/vda1"
	var c Config
	_, err := c.Prepare(raw)
	if err == nil {
		t.Fatal("Prepare accepted a bad configuration")
	}
	msg := err.Error()
	for _, want := range []string{
		`recipes[0]: unknown recipe "nosuch"`,
		"nvidia-535, nvidia-535-open", // what recipes_dir holds
		"kernel 6.1.0-99-cloud-amd64 is not in recipe testdriver's kernel matrix",
		"releases 6.1.0-56-cloud-amd64, 6.12.117+deb12-cloud-amd64, 6.12.118+deb13-cloud-amd64",
		"already exists: remove it or run packer build with -force",
		`disk_size "4Q"`,
		`format "vpc": want one of raw, qcow2, vhd, vmdk, gce`,
		"instance file",
		"image: package initramfs-tools: kpreload's images make their own initramfs",
		`image: cmdline "root=/dev/vda1": the image names its root itself`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not mention %q:\n%s", want, msg)
		}
	}
}

func TestPrepareForceExistingOutput(t *testing.T) {
	raw := baseRaw(t)
	if err := os.MkdirAll(raw["output_directory"].(string), 0o755); err != nil {
		t.Fatal(err)
	}
	raw["packer_force"] = true
	var c Config
	if _, err := c.Prepare(raw); err != nil {
		t.Fatalf("Prepare with -force: %v", err)
	}
}

func TestPrepareOutputUnderFile(t *testing.T) {
	raw := baseRaw(t)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	raw["output_directory"] = filepath.Join(file, "out")
	var c Config
	_, err := c.Prepare(raw)
	if err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("Prepare error = %v, want one saying %s is not a directory", err, file)
	}
}

func TestPrepareMissingBinaries(t *testing.T) {
	raw := baseRaw(t)
	delete(raw, "kpreload_binary")
	delete(raw, "init_binary")
	old := pkrcfg.Executable
	pkrcfg.Executable = func() (string, error) { return filepath.Join(t.TempDir(), "packer-plugin-kpreload"), nil }
	t.Cleanup(func() { pkrcfg.Executable = old })
	t.Chdir(t.TempDir())
	raw["recipes_dir"], _ = filepath.Abs(recipesDir)
	var c Config
	_, err := c.Prepare(raw)
	if err == nil {
		t.Fatal("Prepare accepted a configuration without binaries")
	}
	for _, want := range []string{"bin/kpreload", "bin/kpreload-init"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s:\n%v", want, err)
		}
	}
}

func TestArtifact(t *testing.T) {
	dir := t.TempDir()
	// Every format, in the order asked: each file is in Files() for
	// post-processors, and in State by its format's name.
	m := &image.Manifest{Name: "ci", Kernels: []string{"6.1.0-56-cloud-amd64"}, BootFirmware: []string{"bios", "uefi"}}
	var want []string
	for _, f := range []string{"vmdk", "raw", "gce", "qcow2", "vhd"} {
		p := image.OutputPath(dir, "ci", f)
		m.Files = append(m.Files, image.File{Path: p, Format: f})
		want = append(want, p)
	}
	a := newArtifact(m, filepath.Join(dir, "ci.manifest.json"))
	want = append(want, a.ManifestPath)
	for _, f := range a.Files() {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.Files(); !slices.Equal(got, want) {
		t.Errorf("Files() = %q, want %q", got, want)
	}
	for _, c := range []struct {
		key  string
		want string
	}{
		{"raw", "ci.raw"}, {"qcow2", "ci.qcow2"}, {"vhd", "ci.vhd"}, {"vmdk", "ci.vmdk"}, {"gce", "ci.tar.gz"}, {"manifest", "ci.manifest.json"},
	} {
		if got := a.State(c.key); got != filepath.Join(dir, c.want) {
			t.Errorf("State(%s) = %v, want %s", c.key, got, filepath.Join(dir, c.want))
		}
	}
	if got, ok := a.State("boot_firmware").([]string); !ok || !slices.Equal(got, []string{"bios", "uefi"}) {
		t.Errorf("State(boot_firmware) = %v, want [bios uefi]", a.State("boot_firmware"))
	}
	if got := a.State("secure_boot"); got != false {
		t.Errorf("State(secure_boot) = %v, want false", got)
	}
	if s := a.String(); !strings.Contains(s, "ci.tar.gz") || !strings.Contains(s, "boots under bios and uefi") {
		t.Errorf("String() = %q, want every file and the firmware", s)
	}
	if err := a.Destroy(); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	for _, f := range a.Files() {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s still exists after Destroy (stat: %v)", f, err)
		}
	}
}

func TestPrepareRemote(t *testing.T) {
	fakeKernels(t, "6.1.0-56-cloud-amd64")
	keys := filepath.Join(t.TempDir(), "team")
	if _, err := cellsign.Generate(keys+".key", keys+".pub"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		set  map[string]interface{}
		err  string
	}{
		{"registry, unsigned on purpose", map[string]interface{}{"remote": "oci://127.0.0.1:5000/kpreload/cells", "plain_http": true, "allow_unsigned": true}, ""},
		{"registry without trusted keys", map[string]interface{}{"remote": "oci://127.0.0.1:5000/kpreload/cells", "plain_http": true}, "without remote_trust: the image's drivers would be taken from the registry unsigned"},
		{"allow_unsigned without remote", map[string]interface{}{"allow_unsigned": true}, "but remote is not"},
		{"not oci", map[string]interface{}{"remote": "https://registry.example.com/cells"}, "remote: remote \"https://registry.example.com/cells\": want oci://HOST[:PORT]/REPO"},
		{"plain_http alone", map[string]interface{}{"plain_http": true}, "plain_http, remote_trust, remote_sign and allow_unsigned are set but remote is not"},
		{"trusted and signing keys", map[string]interface{}{"remote": "oci://127.0.0.1:5000/kpreload/cells", "remote_trust": []string{keys + ".pub"}, "remote_sign": keys + ".key"}, ""},
		{"a missing trusted key", map[string]interface{}{"remote": "oci://127.0.0.1:5000/kpreload/cells", "remote_trust": []string{keys + ".absent"}}, "remote_trust: trusted key: open"},
		{"a public key to sign with", map[string]interface{}{"remote": "oci://127.0.0.1:5000/kpreload/cells", "remote_sign": keys + ".pub"}, "remote_sign: signing key"},
		{"trust without remote", map[string]interface{}{"remote_trust": []string{keys + ".pub"}}, "but remote is not"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := baseRaw(t)
			for k, v := range tc.set {
				raw[k] = v
			}
			var c Config
			_, err := c.Prepare(raw)
			if tc.err == "" {
				if err != nil {
					t.Fatalf("Prepare: %v", err)
				}
				if o := c.Options(); o.Stage.Remote == nil || o.Stage.Remote.String() != tc.set["remote"] {
					t.Errorf("Options().Remote = %v, want %v", o.Stage.Remote, tc.set["remote"])
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Prepare error = %v, want one containing %q", err, tc.err)
			}
		})
	}
}
