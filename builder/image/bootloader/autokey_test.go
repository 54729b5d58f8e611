package bootloader

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kpreload/kpreload/builder/modkey"
	"github.com/kpreload/kpreload/builder/recipe"
)

func TestAutoSign(t *testing.T) {
	cache := t.TempDir()
	a, b := &recipe.Recipe{Name: "a"}, &recipe.Recipe{Name: "b"}
	got, key, created, err := AutoSign([]*recipe.Recipe{a, b}, cache)
	if err != nil || key == nil || !created {
		t.Fatalf("AutoSign(no recipe key) = %v, key %v, created %v; want a new key", err, key, created)
	}
	for i, r := range got {
		if s := r.Signing; s == nil || s.Key != key.Key || s.Cert != key.Cert || s.Hash != recipe.DefaultSignHash {
			t.Errorf("recipe %d signing %+v, want the cache's key %s", i, s, key.Dir)
		}
	}
	if a.Signing != nil || b.Signing != nil {
		t.Error("AutoSign changed the caller's recipes")
	}
	// The key the image enrolls is the one the recipes now sign with.
	cert, _, _, err := ModuleCert(got)
	if err != nil || !cert.Equal(key.Certificate) {
		t.Errorf("ModuleCert = %v, want the cache's certificate", err)
	}
	// A later build reuses it.
	_, again, created, err := AutoSign([]*recipe.Recipe{a}, cache)
	if err != nil || created || !again.Certificate.Equal(key.Certificate) {
		t.Errorf("second AutoSign = %v, created %v; want the same key reused", err, created)
	}

	// A recipe's own key wins: nothing changes, no key is made.
	other := t.TempDir()
	own := &recipe.Recipe{Name: "own", Signing: &recipe.Signing{Key: "k.pem", Cert: "c.pem"}}
	got, key, _, err = AutoSign([]*recipe.Recipe{a, own}, other)
	if err != nil || key != nil || got[0] != a || got[1] != own {
		t.Errorf("AutoSign(a recipe key) = %v, key %v; want the recipes as they are", err, key)
	}
	if _, err := os.Stat(modkey.Dir(other)); !os.IsNotExist(err) {
		t.Errorf("a key was made although a recipe names one: %v", err)
	}

	// A cache the key cannot be made in is an error naming why.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := AutoSign([]*recipe.Recipe{a}, file); err == nil {
		t.Error("AutoSign into a file: no error")
	}
}
