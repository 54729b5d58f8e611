package image

import (
	"context"
	"fmt"

	"github.com/kpreload/kpreload/builder/image/stage"
)

// drivers makes sure the module cache holds every cell the image needs. The
// cells it adds stay: the cache is content-addressed and each cell is stored
// whole or not at all, so a later build uses them.
func (j *Job) drivers(ctx context.Context) error {
	o := j.o
	if err := stage.EnsureCells(ctx, stage.Options{
		Kernels: o.Kernels, Recipes: o.Recipes, CacheDir: o.CacheDir, DownloadDir: o.DownloadDir,
		BuildMissing: o.BuildMissing, Remote: o.Remote, Lister: o.Lister, Progress: o.Progress,
	}); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	return nil
}
