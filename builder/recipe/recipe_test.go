package recipe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

const recipesDir = "../../recipes"

// TestShippedRecipes loads every recipe in recipes/ and checks the facts
// each one is meant to carry.
func TestShippedRecipes(t *testing.T) {
	rs, err := LoadDir(recipesDir)
	if err != nil {
		t.Fatalf("LoadDir(%q): %v", recipesDir, err)
	}
	byName := map[string]*Recipe{}
	for _, r := range rs {
		byName[r.Name] = r
		if base := strings.TrimSuffix(filepath.Base(r.File), ".yaml"); base != r.Name {
			t.Errorf("%s: name %q, want the file's base name %q", r.File, r.Name, base)
		}
	}
	want := []struct {
		name, version, flavor, pkg, path, suite string
	}{
		{"nvidia-535", "535.261.03", FlavorProprietary, "nvidia-kernel-dkms=535.261.03-1", "usr/src/nvidia-current-535.261.03", ""},
		{"nvidia-535-open", "535.261.03", FlavorOpen, "nvidia-open-kernel-dkms=535.261.03-1", "usr/src/nvidia-current-open-535.261.03", ""},
		{"nvidia-tesla-535", "535.216.03", FlavorProprietary, "nvidia-tesla-535-kernel-dkms=535.216.03-3~deb12u1", "usr/src/nvidia-tesla-535-535.216.03", ""},
		{"nvidia-tesla-470", "470.256.02", FlavorProprietary, "nvidia-tesla-470-kernel-dkms=470.256.02-1~deb12u1", "usr/src/nvidia-tesla-470-470.256.02", ""},
		{"nvidia-550", "550.163.01", FlavorProprietary, "nvidia-kernel-dkms=550.163.01-2", "usr/src/nvidia-current-550.163.01", "trixie"},
		{"nvidia-550-open", "550.163.01", FlavorOpen, "nvidia-open-kernel-dkms=550.163.01-2", "usr/src/nvidia-current-open-550.163.01", "trixie"},
		{"nvidia-tesla-550", "550.54.15", FlavorProprietary, "nvidia-tesla-550-kernel-dkms=550.54.15-5", "usr/src/nvidia-tesla-550-550.54.15", "sid"},
		{"nvidia-tesla-450", "450.248.02", FlavorProprietary, "nvidia-tesla-450-kernel-dkms=450.248.02-14", "usr/src/nvidia-tesla-450-450.248.02", "sid"},
		{"testdriver", "1.0.0", FlavorOpen, "", "", ""},
		{"testdriver-2", "2.0.0", FlavorOpen, "", "", ""},
	}
	for _, w := range want {
		r, ok := byName[w.name]
		if !ok {
			t.Errorf("recipe %s is missing from %s", w.name, recipesDir)
			continue
		}
		if r.Driver.Version != w.version || r.Flavor != w.flavor || r.Source.Package != w.pkg || r.Source.Path != w.path || r.Suite != w.suite {
			t.Errorf("%s: version %q flavor %q source %q path %q suite %q, want %q %q %q %q %q", w.name,
				r.Driver.Version, r.Flavor, r.Source.Package, r.Source.Path, r.Suite, w.version, w.flavor, w.pkg, w.path, w.suite)
		}
		if r.Flavor == FlavorOpen && r.Source.Package != "" && !slices.Contains(r.Patches, "patches/nvidia-open-pci-resize-resource.patch") {
			t.Errorf("%s: patches %v, want the pci_resize_resource conftest patch", w.name, r.Patches)
		}
		if r.Source.Package == "" {
			continue
		}
		// NVIDIA recipes: firmware and version-matched userspace carry the driver version.
		for _, ref := range append(slices.Clone(r.Firmware), r.Userspace...) {
			name, v, _ := SplitPackage(ref)
			if name == "nvidia-persistenced" {
				continue // one contrib package for every branch
			}
			if UpstreamVersion(v) != r.Driver.Version {
				t.Errorf("%s: %s has version %s, want upstream %s", r.Name, ref, v, r.Driver.Version)
			}
		}
		if r.SupportedGPUs == nil || UpstreamVersion(pinVersion(r.SupportedGPUs.Package)) != r.Driver.Version {
			t.Errorf("%s: supported-gpus %+v, want a package of version %s", r.Name, r.SupportedGPUs, r.Driver.Version)
		}
		want := []string{"nvidia", "nvidia-modeset", "nvidia-drm", "nvidia-uvm", "nvidia-peermem"}
		if r.Name == "nvidia-tesla-450" {
			want = want[:4] // the 450 branch has no nvidia-peermem
		}
		if !slices.Equal(r.Modules, want) {
			t.Errorf("%s: modules %v, want %v", r.Name, r.Modules, want)
		}
	}
	// The 555 branch follows experimental: its version is selected at build time.
	following := map[string]string{"nvidia-555": "nvidia-kernel-dkms", "nvidia-555-open": "nvidia-open-kernel-dkms"}
	for name, pkg := range following {
		r := byName[name]
		if r == nil {
			t.Errorf("recipe %s is missing from %s", name, recipesDir)
			continue
		}
		if !r.Selects() || r.Source.Package != pkg || r.Source.Select.String() != "newest 555 of experimental" || r.Driver.Version != "" {
			t.Errorf("%s: source %+v select %+v version %q, want %s selecting the newest 555 of experimental", name, r.Source, r.Source.Select, r.Driver.Version, pkg)
		}
	}
	if len(rs) != len(want)+len(following) {
		t.Errorf("LoadDir(%q) loaded %d recipes, want %d", recipesDir, len(rs), len(want)+len(following))
	}

	td := byName["testdriver"]
	if td != nil {
		if got, want := td.SourceDir(), filepath.Join(recipesDir, "testdriver"); got != want {
			t.Errorf("testdriver SourceDir() = %q, want %q", got, want)
		}
		if want := []string{"6.1.0-56-cloud-amd64", "6.12.117+deb12-cloud-amd64", "6.12.118+deb13-cloud-amd64"}; !slices.Equal(td.Kernels.Releases, want) {
			t.Errorf("testdriver kernels %v, want %v", td.Kernels.Releases, want)
		}
	}
	if open := byName["nvidia-535-open"]; open != nil && !slices.Contains(open.Kernels.Releases, "6.12.117+deb12-cloud-amd64") {
		t.Errorf("nvidia-535-open kernels %v, want 6.12.117+deb12-cloud-amd64 (needs the patch) requested", open.Kernels.Releases)
	}
	// The new branches build for the newest 6.1, bookworm-backports 6.12 and trixie kernels.
	for _, name := range []string{"nvidia-550", "nvidia-550-open", "nvidia-tesla-550", "nvidia-tesla-450"} {
		r := byName[name]
		if r == nil {
			continue
		}
		want := []Selector{{Series: "6.1", Flavor: "cloud-amd64", Newest: 1}, {Series: "6.12", Flavor: "cloud-amd64", Newest: 1}, {Series: "6.12", Flavor: "cloud-amd64", Newest: 1, Suite: "trixie"}}
		if !slices.Equal(r.Kernels.Select, want) {
			t.Errorf("%s kernels %+v, want %+v", name, r.Kernels.Select, want)
		}
	}
	if nv := byName["nvidia-535"]; nv != nil {
		want := Matrix{Releases: []string{"6.1.0-56-cloud-amd64"}, Select: []Selector{{Series: "6.1", Flavor: "cloud-amd64", Newest: 1}}}
		if !slices.Equal(nv.Kernels.Releases, want.Releases) || !slices.Equal(nv.Kernels.Select, want.Select) {
			t.Errorf("nvidia-535 kernels %+v, want %+v", nv.Kernels, want)
		}
	}
}

func pinVersion(ref string) string {
	_, v, _ := SplitPackage(ref)
	return v
}

// TestShippedPackagesExist asks the real apt archive for every package the
// shipped recipes pin, and checks the DKMS source of the test driver.
func TestShippedPackagesExist(t *testing.T) {
	testenv.SkipShort(t, "reads Debian's archive over the network")
	if _, err := exec.LookPath("apt-cache"); err != nil {
		t.Fatalf("apt-cache not found (%v): run on Debian with scripts/deps.sh", err)
	}
	rs, err := LoadDir(recipesDir)
	if err != nil {
		t.Fatalf("LoadDir(%q): %v", recipesDir, err)
	}
	type pin struct{ ref, suite, file string }
	seen := map[string]bool{}
	var pins []pin
	arcs := &AptArchives{}
	for _, r := range rs {
		// A recipe that selects its version must resolve to packages the
		// archive carries.
		r, pick, err := r.ResolveDriver(context.Background(), arcs)
		if err != nil {
			t.Errorf("%v (run scripts/deps.sh, then apt-get update)", err)
			continue
		}
		if pick.Version != "" {
			t.Logf("%s: %s picks %s (%s, published by %s)", r.Name, pick.Selector, pick.Version, pick.Suite, pick.Published.Format("2006-01-02"))
		}
		refs := append(append([]string{r.Source.Package}, r.Firmware...), r.Userspace...)
		if r.SupportedGPUs != nil {
			refs = append(refs, r.SupportedGPUs.Package)
		}
		for _, ref := range refs {
			if key := r.Suite + " " + ref; ref != "" && !seen[key] {
				seen[key] = true
				pins = append(pins, pin{ref, r.Suite, r.File})
			}
		}
	}
	bySuite := map[string][]pin{}
	for _, p := range pins {
		bySuite[p.suite] = append(bySuite[p.suite], p)
	}
	for suite, ps := range bySuite {
		a, err := archive.New(suite, archive.DefaultCache())
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range ps {
			name, _, _ := SplitPackage(p.ref)
			names = append(names, name)
		}
		has, err := a.VersionsOf(context.Background(), names...)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			name, version, _ := SplitPackage(p.ref)
			if !slices.Contains(has[name], version) {
				t.Errorf("%s: %v (run scripts/deps.sh, then apt-get update)", p.file, &archive.NotCarriedError{Suite: a.Suite, Name: name, Version: version, Has: has[name]})
			}
		}
	}
	if len(pins) < 30 {
		t.Errorf("checked %d pinned packages, want at least 30", len(pins))
	}
	if len(bySuite) < 3 {
		t.Errorf("the recipes read %d suites, want bookworm, trixie and sid", len(bySuite))
	}
}

// writeRecipe writes text as name in a new temp dir and returns its path.
func writeRecipe(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const validHead = `name: x
driver:
  name: nvidia
  version: 535.261.03
flavor: open
source:
  package: nvidia-open-kernel-dkms=535.261.03-1
  path: usr/src/nvidia-current-open-535.261.03
modules: [nvidia, nvidia-uvm]
`

// TestLoadErrors checks that malformed recipes fail with an error naming the
// file, the line and the field.
func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name  string
		text  string
		line  int
		field string
		msg   string
	}{
		{"unknown top-level field", validHead + "colour: blue\nkernels: {releases: [6.1.0-56-cloud-amd64]}\n",
			10, "colour", `unknown field "colour"; a recipe takes: name, driver, source`},
		{"unknown nested field", validHead + "kernels:\n  relases: [6.1.0-56-cloud-amd64]\n",
			11, "kernels.relases", `unknown field "relases"; kernels takes: releases, select`},
		{"unknown selector field", validHead + "kernels:\n  select:\n    - series: \"6.1\"\n      newst: 3\n",
			13, "kernels.select[0].newst", `kernels.select[0] takes: series, flavor, newest`},
		{"wrong type int", validHead + "kernels:\n  select:\n    - series: \"6.1\"\n      flavor: cloud-amd64\n      newest: three\n",
			14, "kernels.select[0].newest", `got the string "three", want an integer`},
		{"wrong type in flow mapping", validHead + "kernels: {select: [{series: \"6.1\", flavor: cloud-amd64, newest: lots}]}\n",
			10, "kernels.select[0].newest", `got the string "lots", want an integer`},
		{"string for list", strings.Replace(validHead, "modules: [nvidia, nvidia-uvm]", "modules: nvidia", 1) + "kernels: {releases: [6.1.0-56-cloud-amd64]}\n",
			9, "modules", `got the string "nvidia", want a list of strings`},
		{"list for string", strings.Replace(validHead, "flavor: open", "flavor: [open]", 1) + "kernels: {releases: [6.1.0-56-cloud-amd64]}\n",
			5, "flavor", "got a list, want a string"},
		{"string for mapping", strings.Replace(validHead, "driver:\n  name: nvidia\n  version: 535.261.03\n", "driver: nvidia-535\n\n\n", 1) + "kernels: {releases: [6.1.0-56-cloud-amd64]}\n",
			2, "driver", `want a mapping with name, version`},
		{"bad flavor", strings.Replace(validHead, "flavor: open", "flavor: closed", 1) + "kernels: {releases: [6.1.0-56-cloud-amd64]}\n",
			5, "flavor", `"closed": want proprietary or open`},
		{"missing version", strings.Replace(validHead, "  version: 535.261.03\n", "", 1) + "kernels: {releases: [6.1.0-56-cloud-amd64]}\n",
			2, "driver.version", "missing"},
		{"both source kinds", strings.Replace(validHead, "  path: usr/src/nvidia-current-open-535.261.03\n", "  path: usr/src/nvidia-current-open-535.261.03\n  dir: testdriver\n", 1) + "kernels: {releases: [6.1.0-56-cloud-amd64]}\n",
			9, "source.dir", "source.package and source.dir exclude each other"},
		{"no source", strings.Replace(validHead, "source:\n  package: nvidia-open-kernel-dkms=535.261.03-1\n  path: usr/src/nvidia-current-open-535.261.03\n", "", 1) + "kernels: {releases: [6.1.0-56-cloud-amd64]}\n",
			0, "source", "missing; set source.package"},
		{"tab indentation", "name: x\ndriver:\n\tversion: 1\n",
			3, "driver.version", "indented with a tab"},
		{"unterminated quote", validHead + "kernels:\n  releases: ['6.1.0-56-cloud-amd64]\n",
			11, "kernels.releases", "YAML syntax error: found unexpected end of stream"},
		{"syntax error on line 1", "name: x: y\n",
			1, "name", "YAML syntax error: mapping values are not allowed"},
		{"duplicate key", validHead + "flavor: proprietary\nkernels: {releases: [6.1.0-56-cloud-amd64]}\n",
			10, "flavor", "defined twice (first at line 5)"},
		{"empty file", "# nothing here\n", 0, "", "the file is empty"},
		{"two documents", validHead + "kernels: {releases: [6.1.0-56-cloud-amd64]}\n---\nname: y\n",
			11, "", "one YAML document"},
		{"top level list", "- name: x\n", 1, "", "a recipe is a mapping of fields"},
		{"unpinned userspace", validHead + "userspace: [libcuda1]\nkernels: {releases: [6.1.0-56-cloud-amd64]}\n",
			10, "userspace[0]", `"libcuda1": want a pinned package, name=version`},
		{"source version differs", strings.Replace(validHead, "535.261.03-1", "535.309.01-0+deb12u1", 1) + "kernels: {releases: [6.1.0-56-cloud-amd64]}\n",
			7, "source.package", "version 535.309.01-0+deb12u1 is not driver.version 535.261.03"},
		{"absolute source path", strings.Replace(validHead, "path: usr/src", "path: /usr/src", 1) + "kernels: {releases: [6.1.0-56-cloud-amd64]}\n",
			8, "source.path", "without the leading /"},
		{"no kernels", validHead, 0, "kernels", "missing or empty"},
		{"bad release", validHead + "kernels:\n  releases:\n    - 6.1-cloud\n",
			12, "kernels.releases[0]", "not a Debian kernel release"},
		{"bad series", validHead + "kernels:\n  select:\n    - {series: \"6\", flavor: cloud-amd64, newest: 1}\n",
			12, "kernels.select[0].series", "want a kernel series major.minor"},
		{"newest zero", validHead + "kernels:\n  select:\n    - series: \"6.1\"\n      flavor: cloud-amd64\n",
			12, "kernels.select[0].newest", "at least 1"},
		{"duplicate module", strings.Replace(validHead, "[nvidia, nvidia-uvm]", "[nvidia_uvm, nvidia, nvidia-uvm]", 1) + "kernels: {releases: [6.1.0-56-cloud-amd64]}\n",
			9, "modules[2]", "listed twice (also modules[0])"},
		{"module file name", strings.Replace(validHead, "[nvidia, nvidia-uvm]", "[nvidia.ko]", 1) + "kernels: {releases: [6.1.0-56-cloud-amd64]}\n",
			9, "modules[0]", "not a module name"},
		{"bad hash", validHead + "signing:\n  key: k.pem\n  cert: c.pem\n  hash: md5\nkernels: {releases: [6.1.0-56-cloud-amd64]}\n",
			13, "signing.hash", `"md5": want one of sha1`},
		{"signing without cert", validHead + "signing:\n  key: k.pem\nkernels: {releases: [6.1.0-56-cloud-amd64]}\n",
			10, "signing.cert", "missing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeRecipe(t, "bad.yaml", tc.text)
			r, err := Load(p)
			if err == nil {
				t.Fatalf("Load(%s) = %+v, nil; want an error for %s", tc.name, r, tc.field)
			}
			want := p + ": "
			if tc.line > 0 {
				want = fmt.Sprintf("%s:%d: ", p, tc.line)
			}
			if tc.field != "" {
				want += tc.field + ": "
			}
			got := err.Error()
			if !hasLine(got, want, tc.msg) {
				t.Errorf("Load(%s) error =\n%s\nwant a line starting %q and containing %q", tc.name, got, want, tc.msg)
			}
			var re *Error
			if !errors.As(err, &re) || re.File != p {
				t.Errorf("Load(%s) error %v is not an *Error for %s", tc.name, err, p)
			}
		})
	}
}

// hasLine reports whether one line of msg starts with prefix and contains sub.
func hasLine(msg, prefix, sub string) bool {
	for _, l := range strings.Split(msg, "\n") {
		if strings.HasPrefix(l, prefix) && strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

// TestValidateAllAtOnce checks that Validate reports every problem, not the first.
func TestValidateAllAtOnce(t *testing.T) {
	text := `name: Bad Name
driver:
  name: nvidia
flavor: closed
source:
  package: nvidia-kernel-dkms
  dir: x
modules: []
kernels:
  select:
    - series: six
      flavor: cloud-amd64
      newest: 0
`
	p := writeRecipe(t, "bad.yaml", text)
	_, err := Load(p)
	if err == nil {
		t.Fatalf("Load(%s) = nil error, want several", p)
	}
	for _, want := range []string{
		p + ":1: name: ",
		p + ":2: driver.version: missing",
		p + ":4: flavor: ",
		p + ":7: source.dir: ",
		p + ":8: modules: missing",
		p + ":11: kernels.select[0].series: ",
		p + ":13: kernels.select[0].newest: ",
	} {
		if !hasLine(err.Error(), want, "") {
			t.Errorf("Load(%s) error =\n%v\nwant a line starting %q", p, err, want)
		}
	}
}

// TestSourceDir checks a directory source against its real dkms.conf.
func TestSourceDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "testdriver"), os.DirFS(filepath.Join(recipesDir, "testdriver"))); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	head := "name: td\ndriver: {name: kpreload-edu, version: %s}\nflavor: open\nsource:\n  dir: %s\nmodules: [%s]\nkernels: {releases: [6.1.0-56-cloud-amd64]}\n"
	tests := []struct {
		version, srcDir, modules string
		line                     int
		field, msg               string
	}{
		{"1.0.0", "testdriver", "kpreload_edu", 0, "", ""},
		{"1.0.0", "testdriver", "kpreload-edu", 0, "", ""},
		{"2.0.0", "testdriver", "kpreload_edu", 2, "driver.version", `says PACKAGE_VERSION="1.0.0"`},
		{"1.0.0", "testdriver", "kpreload_edu, nvidia", 6, "modules[1]", `"nvidia" is not built by`},
		{"1.0.0", "empty", "kpreload_edu", 5, "source.dir", "has no dkms.conf"},
		{"1.0.0", "nowhere", "kpreload_edu", 5, "source.dir", `"nowhere": lstat`},
		{"1.0.0", "../testdriver", "kpreload_edu", 5, "source.dir", `"../testdriver" leads to `},
		{"1.0.0", "/abs/testdriver", "kpreload_edu", 5, "source.dir", "is absolute"},
	}
	for _, tc := range tests {
		p := filepath.Join(dir, "td.yaml")
		if err := os.WriteFile(p, []byte(fmt.Sprintf(head, tc.version, tc.srcDir, tc.modules)), 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := Load(p)
		if tc.field == "" {
			if err != nil {
				t.Errorf("Load(version %s, dir %s, modules %s) = %v, want no error", tc.version, tc.srcDir, tc.modules, err)
			} else if got, want := r.SourceDir(), filepath.Join(dir, "testdriver"); got != want {
				t.Errorf("SourceDir() = %q, want %q", got, want)
			}
			continue
		}
		want := fmt.Sprintf("%s:%d: %s: ", p, tc.line, tc.field)
		if err == nil || !hasLine(err.Error(), want, tc.msg) {
			t.Errorf("Load(version %s, dir %s, modules %s) error = %v, want a line starting %q containing %q", tc.version, tc.srcDir, tc.modules, err, want, tc.msg)
		}
	}
}

// TestLoadDirDuplicateName checks that two recipes cannot share a name.
func TestLoadDirDuplicateName(t *testing.T) {
	dir := t.TempDir()
	text := validHead + "kernels: {releases: [6.1.0-56-cloud-amd64]}\n"
	for _, f := range []string{"a.yaml", "b.yaml"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := LoadDir(dir)
	want := filepath.Join(dir, "b.yaml") + ":1: name: "
	if err == nil || !hasLine(err.Error(), want, "already used by "+filepath.Join(dir, "a.yaml")) {
		t.Errorf("LoadDir(two recipes named x) error = %v, want a line starting %q", err, want)
	}
	if _, err := LoadDir(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no recipes") {
		t.Errorf("LoadDir(empty dir) error = %v, want \"no recipes\"", err)
	}
}

// TestSigning checks defaults and path resolution of the signing section.
func TestSigning(t *testing.T) {
	p := writeRecipe(t, "s.yaml", validHead+"signing:\n  key: keys/signing.pem\n  cert: /etc/kpreload/cert.der\nkernels: {releases: [6.1.0-56-cloud-amd64]}\n")
	r, err := Load(p)
	if err != nil {
		t.Fatalf("Load(%s) = %v", p, err)
	}
	if r.Signing.Hash != DefaultSignHash {
		t.Errorf("Signing.Hash = %q, want %q", r.Signing.Hash, DefaultSignHash)
	}
	if got, want := r.Path(r.Signing.Key), filepath.Join(filepath.Dir(p), "keys/signing.pem"); got != want {
		t.Errorf("Path(%q) = %q, want %q", r.Signing.Key, got, want)
	}
	if got := r.Path(r.Signing.Cert); got != "/etc/kpreload/cert.der" {
		t.Errorf("Path(%q) = %q, want it unchanged", r.Signing.Cert, got)
	}
}

func TestSplitAndUpstream(t *testing.T) {
	tests := []struct {
		ref, name, version, upstream string
		ok                           bool
	}{
		{"nvidia-kernel-dkms=535.261.03-1", "nvidia-kernel-dkms", "535.261.03-1", "535.261.03", true},
		{"nvidia-tesla-535-kernel-dkms=535.216.03-3~deb12u1", "nvidia-tesla-535-kernel-dkms", "535.216.03-3~deb12u1", "535.216.03", true},
		{"x=1:2.0-1-2", "x", "1:2.0-1-2", "2.0-1", true},
		{"libcuda1", "libcuda1", "", "", false},
		{"=1.0", "", "1.0", "1.0", false},
	}
	for _, tc := range tests {
		name, version, ok := SplitPackage(tc.ref)
		if name != tc.name || version != tc.version || ok != tc.ok {
			t.Errorf("SplitPackage(%q) = %q, %q, %v, want %q, %q, %v", tc.ref, name, version, ok, tc.name, tc.version, tc.ok)
		}
		if got := UpstreamVersion(version); got != tc.upstream {
			t.Errorf("UpstreamVersion(%q) = %q, want %q", version, got, tc.upstream)
		}
	}
}

// TestValidateInCode checks a recipe built in code, with no file behind it.
func TestValidateInCode(t *testing.T) {
	r := &Recipe{Name: "x", Driver: Driver{Name: "nvidia", Version: "535.261.03"}, Flavor: "open",
		Source:  Source{Package: "nvidia-open-kernel-dkms=535.261.03-1", Path: "usr/src/nvidia-current-open-535.261.03"},
		Modules: []string{"nvidia"}}
	err := r.Validate()
	if want := "recipe: kernels: missing or empty; list kernels.releases or kernels.select"; err == nil || err.Error() != want {
		t.Errorf("Validate() = %v, want %q", err, want)
	}
	r.Kernels.Releases = []string{"6.1.0-56-cloud-amd64"}
	if err := r.Validate(); err != nil {
		t.Errorf("Validate() = %v, want nil", err)
	}
}
