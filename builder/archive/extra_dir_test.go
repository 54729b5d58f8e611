package archive

import "testing"

// TestExtraDirs: two archives called by one name (a recipe's own "cuda" and
// a shared archives.yaml's) get their own private configurations; the same
// archive named twice gets one.
func TestExtraDirs(t *testing.T) {
	cache := t.TempDir()
	a := Extra{Name: "cuda", URL: "https://a.example/repo", Suites: []string{"/"}, Key: "a.asc"}
	b := a
	b.URL = "https://b.example/repo"
	c := a
	c.Key = "other.asc"
	dir := func(e Extra) string {
		t.Helper()
		arc, err := NewExtra(e, cache)
		if err != nil {
			t.Fatal(err)
		}
		return arc.Dir
	}
	if got, want := dir(a), dir(a); got != want {
		t.Errorf("one archive, two dirs: %s, %s", got, want)
	}
	for _, other := range []Extra{b, c} {
		if got := dir(other); got == dir(a) {
			t.Errorf("archives %+v and %+v share %s", a, other, got)
		}
	}
}
