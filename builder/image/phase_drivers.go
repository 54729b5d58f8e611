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
	if err := stage.EnsureCells(ctx, j.o.Stage); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	return nil
}
