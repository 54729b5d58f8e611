package recipe

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// fakeArchives serves fixed madison answers per archive (Debian suite name
// or extra archive name), for unit tests.
type fakeArchives map[string]fakeCarrier

type fakeCarrier map[string][]archive.Carried

func (f fakeCarrier) Carried(_ context.Context, name string) ([]archive.Carried, error) {
	return f[name], nil
}

func (f fakeArchives) Open(r *Recipe, suite string) (Carrier, string, error) {
	name := suite
	if _, ok := r.extra(suite); !ok {
		var err error
		if name, err = debianArchive(suite); err != nil {
			return nil, "", err
		}
	}
	return f[name], name, nil
}

const selectRecipe = `name: nvidia-550-follow
driver:
  name: nvidia
flavor: open
source:
  package: nvidia-open-kernel-dkms
  path: usr/src/nvidia-current-open-{version}
  select:
    branch: "550"
    suites: [trixie, trixie-backports]
modules: [nvidia]
firmware: [firmware-nvidia-gsp]
userspace: [libcuda1, nvidia-persistenced]
supported-gpus:
  package: nvidia-driver
  path: usr/share/doc/nvidia-driver/supported-gpus.json.gz
kernels:
  releases: [6.1.0-56-cloud-amd64]
`

func TestResolveDriver(t *testing.T) {
	day := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	c := func(v, suite string) archive.Carried {
		return archive.Carried{Version: v, Suite: suite, Published: day}
	}
	trixie := fakeCarrier{
		"nvidia-open-kernel-dkms": {c("555.58.02-1", "trixie-backports"), c("550.163.01-4~bpo13+1", "trixie-backports"), c("550.163.01-2", "trixie"), c("550.200.01-1", "trixie-updates")},
		"firmware-nvidia-gsp":     {c("550.163.01-4~bpo13+1", "trixie-backports"), c("550.163.01-2", "trixie")},
		"libcuda1":                {c("550.163.01-4~bpo13+1", "trixie-backports"), c("550.163.01-2", "trixie")},
		"nvidia-persistenced":     {c("550.163.01-1", "trixie")},
		"nvidia-driver":           {c("550.163.01-4~bpo13+1", "trixie-backports")},
	}
	for _, tc := range []struct {
		name      string
		suites    string
		arcs      fakeArchives
		want      []string // source.package, firmware, userspace..., supported-gpus.package, source.path, driver.version, suite
		wantErr   string
		wantSuite string
	}{
		{
			name:   "backports is newest",
			suites: "[trixie, trixie-backports]",
			arcs:   fakeArchives{"trixie": trixie},
			want: []string{"nvidia-open-kernel-dkms=550.163.01-4~bpo13+1", "firmware-nvidia-gsp=550.163.01-4~bpo13+1", "libcuda1=550.163.01-4~bpo13+1",
				"nvidia-persistenced=550.163.01-1", "nvidia-driver=550.163.01-4~bpo13+1", "usr/src/nvidia-current-open-550.163.01", "550.163.01", "trixie"},
			wantSuite: "trixie-backports",
		},
		{
			name:      "the suite alone",
			suites:    "[trixie]",
			arcs:      fakeArchives{"trixie": trixie},
			want:      []string{"nvidia-open-kernel-dkms=550.163.01-2", "firmware-nvidia-gsp=550.163.01-2", "libcuda1=550.163.01-2", "nvidia-persistenced=550.163.01-1", "nvidia-driver=550.163.01-4~bpo13+1", "usr/src/nvidia-current-open-550.163.01", "550.163.01", "trixie"},
			wantSuite: "trixie",
		},
		{
			name:    "a companion lacks the version",
			suites:  "[sid]",
			arcs:    fakeArchives{"sid": fakeCarrier{"nvidia-open-kernel-dkms": {c("550.163.01-5", "sid")}, "firmware-nvidia-gsp": {c("550.163.01-5", "sid")}, "libcuda1": {c("550.163.01-5", "sid")}, "nvidia-persistenced": {c("535.1-1", "sid")}, "nvidia-driver": {c("550.163.01-5", "sid")}}},
			wantErr: "follow.yaml:13: userspace[1]: nvidia-persistenced: archive sid has no version 550.163.01 to go with nvidia-open-kernel-dkms=550.163.01-5; it has 535.1-1 (sid)",
		},
		{
			name:    "no such branch",
			suites:  "[sid]",
			arcs:    fakeArchives{"sid": fakeCarrier{"nvidia-open-kernel-dkms": {c("535.261.03-1", "sid")}}},
			wantErr: "source.select: newest 550 of sid: no version of nvidia-open-kernel-dkms in branch 550; the suites carry 535.261.03-1 (sid)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Parse("follow.yaml", []byte(strings.Replace(selectRecipe, "[trixie, trixie-backports]", tc.suites, 1)))
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Validate(); err != nil {
				t.Fatal(err)
			}
			got, pick, err := r.ResolveDriver(context.Background(), tc.arcs)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ResolveDriver error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			gotList := append(append(append([]string{got.Source.Package}, got.Firmware...), got.Userspace...), got.SupportedGPUs.Package, got.Source.Path, got.Driver.Version, got.Suite)
			if !slices.Equal(gotList, tc.want) {
				t.Errorf("resolved\n got %q\nwant %q", gotList, tc.want)
			}
			if pick.Suite != tc.wantSuite || !pick.Published.Equal(day) || pick.Selector != "newest 550 of "+strings.Trim(tc.suites, "[]") {
				t.Errorf("pick = %+v, want suite %s published %s", pick, tc.wantSuite, day)
			}
			if r.Driver.Version != "" || r.Source.Select == nil {
				t.Errorf("ResolveDriver changed the recipe it was given: %+v", r.Source)
			}
		})
	}
}

func TestSelectValidate(t *testing.T) {
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"pinned package", "package: nvidia-open-kernel-dkms\n", "package: nvidia-open-kernel-dkms=550.163.01-2\n", "follow.yaml:6: source.package: \"nvidia-open-kernel-dkms=550.163.01-2\": with source.select give the package name only"},
		{"pinned firmware", "firmware: [firmware-nvidia-gsp]", "firmware: [firmware-nvidia-gsp=1-1]", "firmware[0]: \"firmware-nvidia-gsp=1-1\": with source.select give the package name only"},
		{"driver version", "  name: nvidia\n", "  name: nvidia\n  version: 550.163.01\n", "driver.version: 550.163.01: a recipe with source.select takes its version from the archive"},
		{"bad branch", `branch: "550"`, `branch: "5x0"`, "source.select.branch: \"5x0\": want a driver branch"},
		{"unknown suite", "[trixie, trixie-backports]", "[trixie, cuda]", "source.select.suites[1]: \"cuda\" is neither a Debian suite"},
		{"no suites", "[trixie, trixie-backports]", "[]", "source.select.suites: missing"},
		{"archive without key", "[trixie, trixie-backports]", "[cuda]\narchives:\n  - name: cuda\n    url: https://example.invalid/cuda\n    suites: [/]\n", "archives[0].key: missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := strings.Replace(selectRecipe, tc.from, tc.to, 1)
			if text == selectRecipe {
				t.Fatalf("%q is not in the recipe", tc.from)
			}
			r, err := Parse("follow.yaml", []byte(text))
			if err == nil {
				err = r.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestSelectFromSignedArchive resolves a recipe whose driver comes from a
// real signed apt archive on loopback (reprepro, gpg), named in the recipe's
// archives: the newest version of the branch is picked, its companions
// follow; with the wrong key nothing resolves.
func TestSelectFromSignedArchive(t *testing.T) {
	repo := testenv.StartAptArchive(t, "stable", "testing", "next")
	for _, p := range []struct{ suite, pkg string }{
		{"stable", "team-kernel-dkms=555.1.2-1"}, {"testing", "team-kernel-dkms=555.3.4-1"}, {"next", "team-kernel-dkms=560.1.1-1"},
		{"stable", "team-firmware=555.1.2-1"}, {"testing", "team-firmware=555.3.4-2"},
	} {
		name, v, _ := SplitPackage(p.pkg)
		repo.Publish(p.suite, name, v)
	}
	dir := t.TempDir()
	writeRecipe := func(key string) *Recipe {
		t.Helper()
		text := fmt.Sprintf(`name: team-555
driver:
  name: team
flavor: proprietary
archives:
  - name: team
    url: %s
    suites: [stable, testing, next]
    components: [main]
    key: %s
source:
  package: team-kernel-dkms
  path: usr/src/team-{version}
  select:
    branch: "555"
    suites: [team]
modules: [team]
firmware: [team-firmware]
kernels:
  releases: [6.1.0-56-cloud-amd64]
`, repo.URL, key)
		file := filepath.Join(dir, "team-555.yaml")
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := Load(file)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	arcs := &AptArchives{Cache: t.TempDir()}
	// The archive's key beside the recipe (a key outside the recipes
	// directory is refused).
	team, err := os.ReadFile(repo.Key)
	if err != nil {
		t.Fatal(err)
	}
	teamKey := "team" + filepath.Ext(repo.Key)
	write(t, filepath.Join(dir, teamKey), string(team))
	got, pick, err := writeRecipe(teamKey).ResolveDriver(context.Background(), arcs)
	if err != nil {
		t.Fatal(err)
	}
	if got.Source.Package != "team-kernel-dkms=555.3.4-1" || !slices.Equal(got.Firmware, []string{"team-firmware=555.3.4-2"}) || got.Source.Path != "usr/src/team-555.3.4" || got.Suite != "team" {
		t.Errorf("resolved source %+v firmware %v suite %q, want team-kernel-dkms=555.3.4-1, team-firmware=555.3.4-2, suite team", got.Source, got.Firmware, got.Suite)
	}
	if pick.Suite != "testing" || pick.Published.IsZero() {
		t.Errorf("pick = %+v, want suite testing with the Release file's date", pick)
	}
	// The resolved recipe downloads from the same signed archive.
	arc, err := got.Archive(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := arc.Download(context.Background(), "team-kernel-dkms", "555.3.4-1", t.TempDir()); err != nil {
		t.Errorf("download from the resolved archive: %v", err)
	}

	wrong := repo.NewKey(filepath.Join(dir, "wrong.asc"))
	_, _, err = writeRecipe("wrong.asc").ResolveDriver(context.Background(), &AptArchives{Cache: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "is not signed by the key "+wrong) || !strings.Contains(err.Error(), "source.select.suites[0]") {
		t.Errorf("wrong key: error = %v, want the signature refused, naming the field", err)
	}
}
