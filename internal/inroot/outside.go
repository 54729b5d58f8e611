package inroot

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// OpenPath opens the regular file at path (relative to the working
// directory, links followed as usual) for reading, with the checks of Open:
// a FIFO, a device or a socket is refused, never waited on. The caller
// bounds what it reads.
func OpenPath(file string) (*os.File, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: file, Err: err}
	}
	f, err := Open("/", abs)
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path == abs {
		pe.Path = file
	}
	return f, err
}
