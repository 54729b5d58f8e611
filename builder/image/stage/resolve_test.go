package stage

import (
	"context"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/builder/recipe"
)

// fakeArchives answers every suite with the same versions per package.
type fakeArchives map[string][]archive.Carried

func (f fakeArchives) Carried(_ context.Context, name string) ([]archive.Carried, error) {
	return f[name], nil
}

func (f fakeArchives) Open(_ *recipe.Recipe, suite string) (recipe.Carrier, string, error) {
	return f, suite, nil
}

const selectingRecipe = `name: edu-follow
driver:
  name: kpreload_edu
flavor: open
source:
  package: kpreload-edu-dkms
  path: usr/src/kpreload-edu-{version}
  select:
    branch: "2"
    suites: [trixie]
modules: [kpreload_edu]
userspace: [kpreload-edu-utils]
kernels:
  releases: [6.1.0-56-cloud-amd64]
`

// TestPinRecipes checks a recipe that selects its driver version is pinned
// to the newest of its branch once, before the image reads it, and one
// that pins is kept as it is.
func TestPinRecipes(t *testing.T) {
	sel, err := recipe.Parse("edu-follow.yaml", []byte(selectingRecipe))
	if err != nil {
		t.Fatal(err)
	}
	pinning := &recipe.Recipe{Name: "pinned"}
	arcs := fakeArchives{
		"kpreload-edu-dkms":  {{Version: "1.0.0-1", Suite: "trixie"}, {Version: "2.0.0-1", Suite: "trixie"}, {Version: "2.1.0-1", Suite: "trixie"}},
		"kpreload-edu-utils": {{Version: "2.1.0-1", Suite: "trixie"}},
	}
	var said []string
	got, err := PinRecipes(context.Background(), []*recipe.Recipe{sel, pinning}, arcs, func(m string) { said = append(said, m) })
	if err != nil {
		t.Fatal(err)
	}
	if got[1] != pinning {
		t.Errorf("a pinning recipe was replaced: %+v", got[1])
	}
	if got, want := got[0].Driver.Version, "2.1.0"; got != want {
		t.Errorf("pinned driver version = %q, want %q", got, want)
	}
	if got, want := strings.Join(got[0].Userspace, ","), "kpreload-edu-utils=2.1.0-1"; got != want {
		t.Errorf("pinned userspace = %q, want %q", got, want)
	}
	if len(said) != 1 || !strings.Contains(said[0], "2.1.0-1") {
		t.Errorf("progress = %q, want one line naming the version picked", said)
	}
	if _, err := PinRecipes(context.Background(), []*recipe.Recipe{sel}, fakeArchives{}, nil); err == nil || !strings.Contains(err.Error(), "edu-follow") {
		t.Errorf("nothing carried: err = %v, want an error naming the recipe", err)
	}
}
