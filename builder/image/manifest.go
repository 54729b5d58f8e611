package image

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"

	"github.com/kpreload/kpreload/internal/inroot"
)

// digest returns a file's size and SHA-256.
func digest(path string) (int64, string, error) {
	f, err := inroot.OpenPath(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", fmt.Errorf("digest %s: %w", path, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// ReadManifest reads a manifest Build wrote.
func ReadManifest(path string) (*Manifest, error) {
	b, err := inroot.ReadPath(path, inroot.MaxLarge)
	if err != nil {
		return nil, err
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("image manifest %s: %w", path, err)
	}
	return &m, nil
}
