package cdispec

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/internal/inroot"
)

// Marker is the first line of every spec file kpreload writes. kpreload
// rewrites or removes a spec file only when it starts with this line, so a
// spec another tool wrote (NVIDIA Container Toolkit's nvidia-cdi-refresh or
// nvidia-ctk cdi generate, an operator's own) is never touched, whatever its
// name. It is a YAML comment, not a CDI annotation: spec annotations need
// cdiVersion 0.6.0, which the CDI library of Debian 12's podman (0.5) refuses.
const Marker = "# Written by kpreload (kpreload cdi refresh); kpreload rewrites and removes this file. Delete this line to keep it as your own."

// Ownership says who wrote a spec file, as Check found it.
type Ownership struct {
	// Exists is false when there is no file (nor anything else) at the path.
	Exists bool
	// Own is true for a regular file that starts with Marker.
	Own bool
	// Why says, for an existing file that is not kpreload's, why not
	// ("no kpreload marker on its first line", "a symbolic link", "a named pipe").
	Why string
}

// Check says whether file, a path of the system at root, is a spec kpreload
// wrote. The file itself is never followed when it is a link, and never
// opened when it is not a regular file (a FIFO is not waited on); what is
// read is bounded (inroot.MaxLarge).
func Check(root, file string) (Ownership, error) {
	st, err := inroot.Lstat(root, file)
	if errors.Is(err, fs.ErrNotExist) {
		return Ownership{}, nil
	}
	if err != nil {
		return Ownership{}, fmt.Errorf("cdi: %w", err)
	}
	switch m := st.Mode(); {
	case m&fs.ModeSymlink != 0:
		return Ownership{Exists: true, Why: "a symbolic link"}, nil
	case m&fs.ModeNamedPipe != 0:
		return Ownership{Exists: true, Why: "a named pipe"}, nil
	case m.IsDir():
		return Ownership{Exists: true, Why: "a directory"}, nil
	case !m.IsRegular():
		return Ownership{Exists: true, Why: "not a regular file (" + m.Type().String() + ")"}, nil
	}
	b, err := inroot.ReadFile(root, file, inroot.MaxLarge)
	if err != nil {
		return Ownership{}, fmt.Errorf("cdi: %w", err)
	}
	if !IsMarked(b) {
		return Ownership{Exists: true, Why: "no kpreload marker on its first line"}, nil
	}
	return Ownership{Exists: true, Own: true}, nil
}

// IsMarked says whether spec data starts with kpreload's Marker line.
func IsMarked(data []byte) bool {
	return bytes.HasPrefix(data, []byte(Marker+"\n"))
}

// Mark puts the Marker line before YAML spec data (once).
func Mark(data []byte) []byte {
	if IsMarked(data) {
		return data
	}
	return append([]byte(Marker+"\n"), data...)
}

// NotOwnError is the refusal to write over a file kpreload did not write.
type NotOwnError struct {
	// File is the host path; Why says what it is (Ownership.Why).
	File, Why string
}

func (e *NotOwnError) Error() string {
	return fmt.Sprintf("cdi: %s is not a spec kpreload wrote (%s): left as it is. kpreload writes over a spec file only when it starts with the line %q; move that file away (it may be another tool's, e.g. NVIDIA's toolkit) and run again, or write elsewhere (-o FILE)", e.File, e.Why, Marker)
}

// WriteOwn writes YAML spec data, marked as kpreload's (Mark), to file, a
// path of the system at root, atomically and validated (WriteFile), unless
// something kpreload did not write is there: then it returns a *NotOwnError
// and changes nothing.
func WriteOwn(root, file string, data []byte) error {
	o, err := Check(root, file)
	if err != nil {
		return err
	}
	if o.Exists && !o.Own {
		return &NotOwnError{File: filepath.Join(root, file), Why: o.Why}
	}
	return WriteFile(filepath.Join(root, file), Mark(data), false)
}

// WriteNew writes spec data to file (a host path) only when nothing is
// there: for JSON specs, which cannot carry the Marker, so kpreload never
// writes over one.
func WriteNew(file string, data []byte, asJSON bool) error {
	if _, err := os.Lstat(file); err == nil {
		return fmt.Errorf("cdi: %s exists: kpreload replaces only the YAML spec files it marked as its own (JSON has no comments, so a JSON spec cannot carry kpreload's marker); remove it first, or write YAML", file)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cdi: %w", err)
	}
	return WriteFile(file, data, asJSON)
}

// RemoveOwn removes file, a path of the system at root, when it is a spec
// kpreload wrote; anything else is left as it is and described by the
// returned Ownership (Exists and not Own). removed says whether a file went.
func RemoveOwn(root, file string) (removed bool, o Ownership, err error) {
	if o, err = Check(root, file); err != nil || !o.Exists || !o.Own {
		return false, o, err
	}
	if err := Remove(filepath.Join(root, file)); err != nil {
		return false, o, err
	}
	return true, o, nil
}

// Record is what kpreload recorded of a spec it wrote (the boot report's
// "cdi" section): its path on the system and its SHA-256.
type Record struct {
	Path, SHA256 string
}

// RemoveRecorded removes a spec an older kpreload wrote without the Marker
// (under /var/run/cdi/nvidia.yaml or kpreload-edu.yaml): only when the file
// at rec.Path is a regular file whose SHA-256 is the one kpreload recorded
// writing, so it is byte for byte kpreload's; anything else is left. It
// reports whether the file was removed.
func RemoveRecorded(root string, rec Record) (bool, error) {
	if rec.Path == "" || rec.SHA256 == "" {
		return false, nil
	}
	st, err := inroot.Lstat(root, rec.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("cdi: %w", err)
	}
	if !st.Mode().IsRegular() {
		return false, nil
	}
	b, err := inroot.ReadFile(root, rec.Path, inroot.MaxLarge)
	if err != nil {
		return false, fmt.Errorf("cdi: %w", err)
	}
	sum := sha256.Sum256(b)
	if !strings.EqualFold(hex.EncodeToString(sum[:]), rec.SHA256) {
		return false, nil
	}
	if err := Remove(filepath.Join(root, rec.Path)); err != nil {
		return false, err
	}
	return true, nil
}
