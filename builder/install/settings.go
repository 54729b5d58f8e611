package install

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"gopkg.in/yaml.v3"
)

// SettingsFile holds a root's boot settings (YAML), relative to the root.
const SettingsFile = "etc/kpreload/boot.yaml"

// Default-kernel policies.
const (
	// NewestWithDriver boots the newest kernel whose driver cells the cache
	// holds: a kernel update the cache has no cell for never takes the GPU away.
	NewestWithDriver = "newest-with-driver"
	// Newest boots the newest kernel, as Debian does, driver or not.
	Newest = "newest"
)

// Settings are a root's boot settings.
type Settings struct {
	// Default is the default-kernel policy: NewestWithDriver (the default) or Newest.
	Default string `yaml:"default"`
}

// ReadSettings reads root's SettingsFile; a missing file gives the defaults.
func ReadSettings(root string) (Settings, error) {
	st := Settings{Default: NewestWithDriver}
	p := filepath.Join(root, SettingsFile)
	f, err := os.Open(p)
	if os.IsNotExist(err) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("boot settings: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return st, fmt.Errorf("boot settings %s: %w", p, err)
	}
	if err := yaml.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("boot settings %s: %w", p, err)
	}
	switch st.Default {
	case "":
		st.Default = NewestWithDriver
	case NewestWithDriver, Newest:
	default:
		return st, fmt.Errorf("boot settings %s: default %q: want %s or %s", p, st.Default, NewestWithDriver, Newest)
	}
	return st, nil
}

// NewestFirst reports whether the newest kernel is the default, driver or not.
func (s Settings) NewestFirst() bool { return s.Default == Newest }

// Describe says the policy in words.
func (s Settings) Describe() string {
	if s.NewestFirst() {
		return "the newest kernel (" + SettingsFile + ": default: " + Newest + ")"
	}
	return "the newest kernel with its driver cells"
}
