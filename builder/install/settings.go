package install

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/kpreload/kpreload/internal/inroot"
)

// SettingsFile holds a root's boot settings (YAML), relative to the root.
const SettingsFile = "etc/kpreload/boot.yaml"

// maxSettings bounds SettingsFile.
const maxSettings = 64 << 10

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

// settingsKeys are the keys SettingsFile may hold.
var settingsKeys = map[string]bool{"default": true}

// DefaultSettings are the settings of a root without SettingsFile.
func DefaultSettings() Settings { return Settings{Default: NewestWithDriver} }

// ReadSettings reads root's SettingsFile (inside root, a regular file of at
// most 64 KiB); a missing file gives the defaults. A file that cannot be
// read, does not parse, holds a bad value or a key it does not know is an
// error naming it.
func ReadSettings(root string) (Settings, error) {
	st, unknown, err := readSettings(root)
	if err != nil {
		return DefaultSettings(), err
	}
	if len(unknown) > 0 {
		return DefaultSettings(), fmt.Errorf("boot settings %s: unknown key(s) %s (known: default)", inroot.Host(root, SettingsFile), strings.Join(unknown, ", "))
	}
	return st, nil
}

// ReadSettingsOrDefaults is ReadSettings for the kernel hooks and
// grub-mkconfig, which must not fail over configuration: a file that cannot
// be used gives the defaults, an unknown key is left out, and each problem
// is a warning naming the file.
func ReadSettingsOrDefaults(root string) (Settings, []string) {
	st, unknown, err := readSettings(root)
	if err != nil {
		return DefaultSettings(), []string{fmt.Sprintf("%v: using the defaults (default: %s)", err, NewestWithDriver)}
	}
	if len(unknown) > 0 {
		return st, []string{fmt.Sprintf("boot settings %s: unknown key(s) %s left out (known: default)", inroot.Host(root, SettingsFile), strings.Join(unknown, ", "))}
	}
	return st, nil
}

// readSettings reads and checks SettingsFile and lists the keys it does not know.
func readSettings(root string) (Settings, []string, error) {
	st := DefaultSettings()
	p := inroot.Host(root, SettingsFile)
	b, err := inroot.ReadFile(root, SettingsFile, maxSettings)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil, nil
	}
	if err != nil {
		return st, nil, fmt.Errorf("boot settings: %w", err)
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(b)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return st, nil, nil // empty
		}
		return st, nil, fmt.Errorf("boot settings %s: %w", p, err)
	}
	var unknown []string
	if len(doc.Content) == 1 {
		m := doc.Content[0]
		if m.Kind != yaml.MappingNode {
			return st, nil, fmt.Errorf("boot settings %s: line %d: want a mapping of settings (default: ...)", p, m.Line)
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			if k := m.Content[i].Value; !settingsKeys[k] {
				unknown = append(unknown, fmt.Sprintf("%q (line %d)", k, m.Content[i].Line))
			}
		}
		sort.Strings(unknown)
		if len(unknown) > 5 {
			unknown = append(unknown[:5], fmt.Sprintf("and %d more", len(unknown)-5))
		}
	}
	if err := doc.Decode(&st); err != nil {
		return DefaultSettings(), nil, fmt.Errorf("boot settings %s: %w", p, err)
	}
	switch st.Default {
	case "":
		st.Default = NewestWithDriver
	case NewestWithDriver, Newest:
	default:
		return DefaultSettings(), nil, fmt.Errorf("boot settings %s: default %q: want %s or %s", p, st.Default, NewestWithDriver, Newest)
	}
	return st, unknown, nil
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

// DescribeDefault says why def, the default DefaultKernel picked among
// kernels under s, is the default: the policy (Describe), or, where the
// policy asks for driver cells and def has none (no bootable kernel has
// any), that it is the newest kernel and none has its driver cells.
func (s Settings) DescribeDefault(kernels []Kernel, def string) string {
	if !s.NewestFirst() {
		for _, k := range kernels {
			if k.Release == def && len(k.Drivers) == 0 {
				return "the newest kernel: no kernel has its driver cells"
			}
		}
	}
	return s.Describe()
}
