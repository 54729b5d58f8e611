package pkrcfg

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/recipe"
)

func TestDefaultBinaryNextToPlugin(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kpreload-init"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	old := Executable
	Executable = func() (string, error) { return filepath.Join(dir, "packer-plugin-kpreload"), nil }
	t.Cleanup(func() { Executable = old })
	if got, want := DefaultBinary("kpreload-init"), filepath.Join(dir, "kpreload-init"); got != want {
		t.Errorf("defaultBinary = %q, want %q", got, want)
	}
	if got, want := DefaultBinary("kpreload"), filepath.Join("bin", "kpreload"); got != want {
		t.Errorf("defaultBinary = %q, want %q", got, want)
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int
		wantErr bool
	}{
		{"", 0, false},
		{"4096", 4096, false},
		{"512M", 512, false},
		{"4G", 4096, false},
		{"1T", 1024 * 1024, false},
		{"-1G", 0, true},
		{"4GB", 0, true},
		{"big", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseSize("disk_size", tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestLoadRecipes(t *testing.T) {
	rs, errs := LoadRecipes("../../../../recipes", []string{"testdriver", "../../../../recipes/nvidia-535.yaml", "nosuch", "testdriver"})
	if got, want := len(rs), 2; got != want {
		t.Fatalf("%d recipes loaded, want %d", got, want)
	}
	if got, want := rs[1].Name, "nvidia-535"; got != want {
		t.Errorf("recipe 1 = %q, want %q", got, want)
	}
	if got, want := len(errs), 2; got != want {
		t.Fatalf("%d errors (%v), want %d", got, errs, want)
	}
	for i, want := range []string{`recipes[2]: unknown recipe "nosuch"`, "recipes[3]: recipe testdriver is listed twice"} {
		if !strings.Contains(errs[i].Error(), want) {
			t.Errorf("error %d = %q, want it to contain %q", i, errs[i], want)
		}
	}
	_, errs = LoadRecipes(t.TempDir(), []string{"testdriver"})
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "holds no recipes") {
		t.Errorf("errors for an empty recipes dir = %v, want one saying it holds no recipes", errs)
	}
}

func TestCheckKernelsResolvesOnlyWhenNeeded(t *testing.T) {
	calls := 0
	old := Lister
	Lister = recipe.ListerFunc(func() ([]string, error) { calls++; return []string{"6.1.0-57-cloud-amd64"}, nil })
	t.Cleanup(func() { Lister = old })
	r := &recipe.Recipe{Name: "r", Kernels: recipe.Matrix{Releases: []string{"6.1.0-56-cloud-amd64"}, Select: []recipe.Selector{{Series: "6.1", Flavor: "cloud-amd64", Newest: 1}}}}
	if errs := CheckKernels([]string{"6.1.0-56-cloud-amd64"}, []*recipe.Recipe{r}, t.TempDir()); len(errs) != 0 || calls != 0 {
		t.Errorf("explicit release: errors %v, %d lister calls; want none, 0", errs, calls)
	}
	if errs := CheckKernels([]string{"6.1.0-57-cloud-amd64", "6.1.0-12-cloud-amd64"}, []*recipe.Recipe{r}, t.TempDir()); len(errs) != 1 || calls != 1 {
		t.Errorf("selector: errors %v, %d lister calls; want one error (6.1.0-12), 1 call", errs, calls)
	}
}

func TestCreatable(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Creatable(filepath.Join(dir, "a", "b")); err != nil {
		t.Errorf("Creatable under a temp dir: %v", err)
	}
	if err := Creatable(filepath.Join(file, "x")); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("Creatable under a file: %v, want a not-a-directory error", err)
	}
}

// TestCheckInstance reads the example instance files of images/ and a bad one.
func TestCheckInstance(t *testing.T) {
	files, _ := filepath.Glob("../../../../images/instance-*.yaml")
	if len(files) < 3 {
		t.Fatalf("found %d instance files in images/, want at least 3", len(files))
	}
	for _, f := range files {
		if err := CheckInstance(f); err != nil {
			t.Errorf("CheckInstance(%s): %v", f, err)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("resources:\n  driver:\n    verison: 535\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := CheckInstance(bad)
	if err == nil || !strings.Contains(err.Error(), "bad.yaml:3") {
		t.Errorf("CheckInstance(bad) = %v, want an error naming bad.yaml:3", err)
	}
}
