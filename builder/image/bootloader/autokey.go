package bootloader

import (
	"fmt"

	"github.com/kpreload/kpreload/builder/modkey"
	"github.com/kpreload/kpreload/builder/recipe"
)

// AutoSign gives every recipe the module cache's own signing key
// (builder/modkey, made on first use as DKMS makes its MOK) when no recipe
// names one, for a Secure Boot image; the recipes are copied, not changed.
// Where a recipe names a key the recipes are returned as they are and key is
// nil: recipe keys win.
func AutoSign(recipes []*recipe.Recipe, cacheDir string) (out []*recipe.Recipe, key *modkey.Key, created bool, err error) {
	for _, r := range recipes {
		if r.Signing != nil {
			return recipes, nil, false, nil
		}
	}
	key, created, err = modkey.Ensure(cacheDir)
	if err != nil {
		return nil, nil, false, fmt.Errorf("no recipe names a signing key, and kpreload's own: %w", err)
	}
	out = make([]*recipe.Recipe, len(recipes))
	for i, r := range recipes {
		c := *r
		c.Signing = &recipe.Signing{Key: key.Key, Cert: key.Cert, Hash: recipe.DefaultSignHash}
		out[i] = &c
	}
	return out, key, created, nil
}
