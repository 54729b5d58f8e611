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

	"github.com/kpreload/kpreload/gpu/activate"
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

// DefaultSpecFile is where Refresh keeps the spec of a kpreload image: a
// directory CDI runtimes read by default, on /run, so it never outlives the boot.
const DefaultSpecFile = "/var/run/cdi/nvidia.yaml"

// Refresh brings a kpreload image's spec file in line with the active driver:
// with an activation record (<root>/run/kpreload/ready) for an NVIDIA driver it
// writes the spec atomically (validated); with none, or another driver active,
// or no NVIDIA driver loaded, it removes the file, so containers never get
// another version's libraries. file is a path on the
// system (joined to root). It reports whether a spec was written. When
// generation fails the file is removed too and the error returned.
func Refresh(root, file string, opts Options) (bool, error) {
	target := filepath.Join(root, file)
	ready, err := activate.ReadReadyIn(root, activate.RunDir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && ready.Driver != "nvidia") {
		return false, Remove(target) // no driver active, or not NVIDIA's
	}
	if err != nil {
		return false, errors.Join(err, Remove(target))
	}
	spec, _, err := Generate(root, opts)
	if errors.Is(err, ErrNoDriver) {
		return false, Remove(target)
	}
	if err != nil {
		return false, errors.Join(err, Remove(target))
	}
	data, err := Marshal(spec, filepath.Ext(file) == ".json")
	if err != nil {
		return false, errors.Join(err, Remove(target))
	}
	if err := WriteFile(target, data, filepath.Ext(file) == ".json"); err != nil {
		return false, errors.Join(err, Remove(target))
	}
	return true, nil
}
