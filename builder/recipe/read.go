package recipe

// Recipes and their patches are read through internal/inroot: only a regular
// file is opened (without blocking, so a FIFO or a device named as one is
// refused at once), and no more than these bounds is read.
const (
	// MaxFile bounds a recipe file.
	MaxFile = 1 << 20
	// MaxPatch bounds a patch file.
	MaxPatch = 16 << 20
)
