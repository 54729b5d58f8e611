package instance

import "github.com/kpreload/kpreload/internal/inroot"

// MaxFile bounds an instance YAML file, as MaxUserData bounds user-data.
const MaxFile = 1 << 20

// ReadPath reads the instance YAML (or user-data) file at path through
// internal/inroot: a regular file only, opened without blocking (a FIFO or a
// device is refused, never waited on), of at most MaxFile bytes.
func ReadPath(path string) ([]byte, error) {
	return inroot.ReadPath(path, MaxFile)
}
