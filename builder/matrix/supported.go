// NVIDIA's supported-gpus lists, fetched on their own: what
// scripts/supported-gpus.sh and `kpreload recipe supported-gpus` ask for,
// through the same recipe loader and archive as a build.

package matrix

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/internal/inroot"
)

// SupportedList is one recipe's supported-gpus.json in the download cache.
type SupportedList struct {
	// Recipes are the names of the recipes whose list this is (recipes of one
	// driver version in two flavours share one package).
	Recipes []string `json:"recipes"`
	// Package and Version name the Debian package the list came from, the
	// version resolved as a build resolves it (source.select follows the
	// archive; a recipe that pins names it).
	Package string `json:"package"`
	Version string `json:"version"`
	// Path is the uncompressed list:
	// DOWNLOADS/supported-gpus/<package>_<version>/supported-gpus.json.
	Path string `json:"path"`
	// SHA256 is the digest of the list's bytes.
	SHA256 string `json:"sha256"`
	// Fetched says this call wrote it (false: it was there).
	Fetched bool `json:"fetched"`
}

// SupportedDir is where FetchSupportedGPUs keeps the list of package
// name at version under downloads.
func SupportedDir(downloads, name, version string) string {
	return filepath.Join(downloads, "supported-gpus", name+"_"+version)
}

// FetchSupportedGPUs resolves each recipe's driver version against the
// archives (opts.Archives, else Debian's and the recipes' own through apt
// under opts.DownloadDir) and makes sure the supported-gpus.json its
// supported-gpus: block names is unpacked under SupportedDir, checked to be
// NVIDIA's format: written to a temporary directory and renamed into place,
// so an interrupted run leaves nothing half-made. Recipes that name no list
// are left out; recipes naming the same package version share one entry.
// The result is in the order of each entry's first recipe.
func FetchSupportedGPUs(ctx context.Context, recipes []*recipe.Recipe, opts Options) ([]SupportedList, error) {
	opts = opts.Resolve()
	downloads, arcs := opts.DownloadDir, opts.Archives
	var out []SupportedList
	seen := map[string]int{}
	for _, r := range recipes {
		if r.SupportedGPUs == nil {
			continue
		}
		pinned, _, err := r.ResolveDriver(ctx, arcs)
		if err != nil {
			return nil, fmt.Errorf("supported-gpus: driver version: %w", err)
		}
		name, version, ok := recipe.SplitPackage(pinned.SupportedGPUs.Package)
		if !ok {
			return nil, fmt.Errorf("recipe %s: supported-gpus.package %q resolved to no version", r.Name, pinned.SupportedGPUs.Package)
		}
		if i, ok := seen[name+"="+version]; ok {
			out[i].Recipes = append(out[i].Recipes, r.Name)
			continue
		}
		seen[name+"="+version] = len(out)
		l, err := fetchSupportedInto(ctx, pinned, downloads, name, version)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// fetchSupportedInto fetches the pinned recipe's list into SupportedDir
// unless a complete one is there.
func fetchSupportedInto(ctx context.Context, pinned *recipe.Recipe, downloads, name, version string) (SupportedList, error) {
	dir := SupportedDir(downloads, name, version)
	dest := filepath.Join(dir, "supported-gpus.json")
	l := SupportedList{Recipes: []string{pinned.Name}, Package: name, Version: version, Path: dest}
	if data, err := inroot.ReadPath(dest, inroot.MaxLarge); err == nil && len(data) > 0 {
		if _, err := checkSupportedGPUs(data, dest); err == nil {
			l.SHA256 = sha256Hex(data)
			return l, nil
		}
		// A list that no longer checks is fetched again below.
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return l, fmt.Errorf("recipe %s: supported-gpus: %w", pinned.Name, err)
	}
	tmp, err := os.MkdirTemp(parent, ".tmp-")
	if err != nil {
		return l, fmt.Errorf("recipe %s: supported-gpus: %w", pinned.Name, err)
	}
	defer os.RemoveAll(tmp)
	_, digest, err := fetchSupportedGPUs(ctx, pinned, downloads, tmp)
	if err != nil {
		return l, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return l, fmt.Errorf("recipe %s: supported-gpus: %w", pinned.Name, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return l, fmt.Errorf("recipe %s: supported-gpus: %w", pinned.Name, err)
	}
	l.SHA256, l.Fetched = digest, true
	return l, nil
}
