package cdispec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"gopkg.in/yaml.v3"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/kpreload/kpreload/internal/fileutil"
)

// Marshal encodes the spec as YAML, or as JSON when asJSON is set.
func Marshal(spec *specs.Spec, asJSON bool) ([]byte, error) {
	if asJSON {
		b, err := json.MarshalIndent(spec, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("cdi: %w", err)
		}
		return append(b, '\n'), nil
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(spec); err != nil {
		return nil, fmt.Errorf("cdi: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("cdi: %w", err)
	}
	return buf.Bytes(), nil
}

// Validate checks encoded spec data exactly as container runtimes read spec files:
// the CDI library's cdi.ReadSpec (strict decoding, version, kind, device names,
// container edits). It returns the parsed spec.
func Validate(data []byte, asJSON bool) (*specs.Spec, error) {
	f, err := os.CreateTemp("", "kpreload-cdi-*"+ext(asJSON))
	if err != nil {
		return nil, fmt.Errorf("cdi: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, fmt.Errorf("cdi: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("cdi: %w", err)
	}
	return ValidateFile(f.Name())
}

// ValidateFile validates a spec file with cdi.ReadSpec and returns the parsed spec.
func ValidateFile(file string) (*specs.Spec, error) {
	s, err := cdi.ReadSpec(file, 0)
	if err != nil {
		return nil, fmt.Errorf("cdi: invalid spec: %w", err)
	}
	return s.Spec, nil
}

func ext(asJSON bool) string {
	if asJSON {
		return ".json"
	}
	return ".yaml"
}

// WriteFile validates data with the CDI library and writes it to file
// atomically (fileutil.WriteAtomic: a temporary file in the same directory,
// synced, renamed over file, the directory synced), so runtimes watching the directory never see a partial or invalid spec.
func WriteFile(file string, data []byte, asJSON bool) error {
	dir := filepath.Dir(file)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cdi: %w", err)
	}
	if _, err := Validate(data, asJSON); err != nil {
		return err
	}
	// The temporary file's name ends in random digits, not .yaml or .json:
	// CDI caches only load *.yaml and *.json.
	if err := fileutil.WriteAtomic(file, data, 0o644, true); err != nil {
		return fmt.Errorf("cdi: %w", err)
	}
	return nil
}

// Remove deletes a spec file; a missing file is not an error.
func Remove(file string) error {
	if err := os.Remove(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cdi: %w", err)
	}
	return nil
}
