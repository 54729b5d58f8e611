package image

import (
	"context"
	"fmt"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/builder/recipe"
)

// downloadDeb returns the .deb of a pinned package ("name=version") of
// recipe r in dir, fetching it from the recipe's suite (builder/archive: the
// host's apt sources for bookworm, kpreload's private configuration for the
// others) when dir does not have it. Pinned versions never change, so a .deb
// found there is the right one; a version the suite lacks is refused, naming
// what it has.
func downloadDeb(ctx context.Context, r *recipe.Recipe, ref, dir, cache string) (string, error) {
	name, version, ok := recipe.SplitPackage(ref)
	if !ok {
		return "", fmt.Errorf("package %q: want name=version", ref)
	}
	a, err := archive.New(r.Suite, cache)
	if err != nil {
		return "", err
	}
	return a.Download(ctx, name, version, dir)
}

// dpkgExtract unpacks a .deb's files into dir with dpkg -x (no maintainer
// scripts, nothing registered with dpkg).
func dpkgExtract(ctx context.Context, deb, dir string) error {
	return archive.Extract(ctx, deb, dir)
}
