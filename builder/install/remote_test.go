package install

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/cellsign"
)

func TestParseRemoteConfig(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"remote: oci://r.example/cells\ntrust: [/etc/kpreload/keys/a.pub]\n", ""},
		{"remote: oci://r.example/cells\nallow_unsigned: true\ntimeout: 30s\n", ""},
		{"remote: oci://r.example/cells\n", "no trust keys"},
		{"remote: https://r.example/cells\ntrust: [/k.pub]\n", "oci://"},
		{"remote: oci://r.example/cells\ntrust: [keys/a.pub]\n", "absolute path"},
		{"remote: oci://r.example/cells\ntrust: [/k.pub]\ntimeout: 3h\n", "up to 1h"},
		{"remote: oci://r.example/cells\ntrust: [/k.pub]\nregistry: x\n", "registry"},
	} {
		_, err := ParseRemoteConfig([]byte(c.text))
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("ParseRemoteConfig(%q) = %v, want %q", c.text, err, c.want)
		}
	}
}

// TestKernelHookPullsFromRegistry: the test driver built by the real dkms
// for 6.1 and 6.12 and pushed, signed, to a real registry; a root that holds
// only the 6.1 cell gets the 6.12 kernel. With its remote.yaml trusting the
// builder's key, the hook pulls the 6.12 cell (verified) and 6.12 becomes
// the default; trusting another key, or trusting none, the cell is refused
// with a warning and the default stays on 6.1.
func TestKernelHookPullsFromRegistry(t *testing.T) {
	if testing.Short() {
		t.Skip("real dkms builds and a registry; -short")
	}
	const newer = "6.12.117+deb12-cloud-amd64"
	ctx := context.Background()
	h := newCellHook(t, newer)
	if _, err := cellsign.Generate(filepath.Join(h.keys, "other.key"), filepath.Join(h.keys, "other.pub")); err != nil {
		t.Fatal(err)
	}
	url := h.url
	res, err := matrix.Run(ctx, matrix.Options{Recipes: []*recipe.Recipe{h.r}, Kernels: []string{testKernel, newer}, CacheDir: h.built, Remote: h.rm})
	if err != nil || len(res) != 2 {
		t.Fatalf("build and push: %+v, %v", res, err)
	}
	oldSet := ""
	for _, c := range res {
		if c.Kernel == testKernel {
			oldSet = c.SetID
		}
	}
	other, _ := os.ReadFile(filepath.Join(h.keys, "other.pub"))

	for _, c := range []struct {
		name, config string
		pulled       bool
		warn         string
	}{
		{"trusted", "remote: " + url + "\nplain_http: true\ntrust: [/etc/kpreload/keys/builder.pub]\n", true, ""},
		{"foreign key", "remote: " + url + "\nplain_http: true\ntrust: [/etc/kpreload/keys/other.pub]\n", false, "refused"},
		{"no trust", "remote: " + url + "\nplain_http: true\n", false, "no trust keys"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := h.root(t, oldSet, map[string]string{
				"etc/kpreload/keys/other.pub": string(other), RemoteFile: c.config,
			})
			var log bytes.Buffer
			got, err := KernelAdded(ctx, Options{Root: root, RootFS: testRootFS(), Log: &log}, newer)
			if err != nil {
				t.Fatalf("postinst: %v\n%s", err, log.String())
			}
			t.Logf("hook output:\n%s", log.String())
			ix, _ := bootindex.Read(bootindex.Path(filepath.Join(root, CacheDir), newer))
			has := ix != nil && len(ix.Sets) > 0
			if c.pulled {
				if len(got.Pulled) != 1 || !strings.Contains(got.Pulled[0], "signed by") || got.Default != newer || !has {
					t.Errorf("pulled %v, default %s, 6.12 index %+v: want the signed 6.12 cell pulled and 6.12 the default", got.Pulled, got.Default, ix)
				}
				return
			}
			if len(got.Pulled) != 0 || got.Default != testKernel || has {
				t.Errorf("pulled %v, default %s, 6.12 index %+v: want nothing pulled and the default on %s", got.Pulled, got.Default, ix, testKernel)
			}
			if !strings.Contains(strings.Join(got.Warnings, "\n"), c.warn) || !strings.Contains(log.String(), c.warn) {
				t.Errorf("warnings %q, output %q: want them to say %q", got.Warnings, log.String(), c.warn)
			}
		})
	}
}

// TestStageRemoteConfig: the keys and credentials a configuration names on
// the build machine go into the root, and the staged configuration names
// them there.
func TestStageRemoteConfig(t *testing.T) {
	src := t.TempDir()
	if _, err := cellsign.Generate(filepath.Join(src, "team.key"), filepath.Join(src, "team.pub")); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		"auth.json":   `{"auths":{}}`,
		"remote.yaml": "remote: oci://r.example/cells\ntrust: [team.pub]\ncredentials: " + filepath.Join(src, "auth.json") + "\n",
	} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root := t.TempDir()
	if err := StageRemoteConfig(filepath.Join(src, "remote.yaml"), root); err != nil {
		t.Fatal(err)
	}
	c, err := ReadRemoteConfig(root)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(c.Trust, ","), "/etc/kpreload/keys/team.pub"; got != want || c.Credentials != "/etc/kpreload/registry-auth.json" {
		t.Errorf("staged trust %q credentials %q, want %q and /etc/kpreload/registry-auth.json", got, c.Credentials, want)
	}
	if fi, err := os.Stat(filepath.Join(root, "etc/kpreload/registry-auth.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("staged credentials: %v, mode %v; want mode 0600", err, fi)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/kpreload/keys/team.pub")); err != nil {
		t.Errorf("staged key: %v", err)
	}
	// A key that is not there fails the staging, naming it.
	if err := os.WriteFile(filepath.Join(src, "bad.yaml"), []byte("remote: oci://r.example/cells\ntrust: [gone.pub]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := StageRemoteConfig(filepath.Join(src, "bad.yaml"), t.TempDir()); err == nil || !strings.Contains(err.Error(), "gone.pub") {
		t.Errorf("staging a configuration with a missing key: %v, want an error naming it", err)
	}
}

// TestStageRemoteConfigKeysOfOneName: two trusted keys with the same file
// name (in two directories) and a bundle of two keys stage to distinct
// files, and the image's configuration trusts all of them; a key given
// twice is refused at staging, naming it.
func TestStageRemoteConfigKeysOfOneName(t *testing.T) {
	src := t.TempDir()
	var ids []string
	for _, d := range []string{"a", "b", "c1", "c2"} {
		if err := os.MkdirAll(filepath.Join(src, d), 0o755); err != nil {
			t.Fatal(err)
		}
		s, err := cellsign.Generate(filepath.Join(src, d, "team.key"), filepath.Join(src, d, "team.pub"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	c1, _ := os.ReadFile(filepath.Join(src, "c1", "team.pub"))
	c2, _ := os.ReadFile(filepath.Join(src, "c2", "team.pub"))
	if err := os.WriteFile(filepath.Join(src, "bundle.pub"), append(c1, c2...), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(src, "remote.yaml")
	if err := os.WriteFile(conf, []byte("remote: oci://r.example/cells\ntrust: [a/team.pub, b/team.pub, bundle.pub]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := StageRemoteConfig(conf, root); err != nil {
		t.Fatal(err)
	}
	c, err := ReadRemoteConfig(root)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(c.Trust, ","), "/etc/kpreload/keys/team.pub,/etc/kpreload/keys/team-2.pub,/etc/kpreload/keys/bundle.pub"; got != want {
		t.Errorf("staged trust %q, want %q", got, want)
	}
	var paths []string
	for _, p := range c.Trust {
		paths = append(paths, filepath.Join(root, p))
	}
	tr, err := cellsign.LoadTrust(paths...)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	if got := tr.IDs(); !slices.Equal(got, ids) {
		t.Errorf("the image trusts %v, want all four keys %v", got, ids)
	}
	if err := os.WriteFile(conf, []byte("remote: oci://r.example/cells\ntrust: [a/team.pub, bundle.pub, c2/team.pub]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := StageRemoteConfig(conf, t.TempDir()); err == nil || !strings.Contains(err.Error(), "given twice") || !strings.Contains(err.Error(), "c2/team.pub") {
		t.Errorf("staging a key twice: %v, want an error naming it", err)
	}
}
