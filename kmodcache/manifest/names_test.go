package manifest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/names"
	"github.com/kpreload/kpreload/kmodcache/names/namestest"
)

// TestSetRecordRefusesOutsideNames: a set record (set.json, the cache's
// sets/<id>.json) whose kernel, driver, version or flavour is any value
// outside the name grammar (namestest's fixed and seeded random cases) is
// refused by Unmarshal and Validate, the reading the cache and a pull do,
// naming the field. "" is refused but for the flavour (no flavour).
func TestSetRecordRefusesOutsideNames(t *testing.T) {
	fields := map[string]func(m *Manifest) *string{
		"kernel release": func(m *Manifest) *string { return &m.Kernel }, "driver name": func(m *Manifest) *string { return &m.Driver },
		"driver version": func(m *Manifest) *string { return &m.Version }, "flavor": func(m *Manifest) *string { return &m.Flavor },
	}
	for _, c := range namestest.All(500) {
		for field, at := range fields {
			if c.Value == "" && field == "flavor" {
				continue
			}
			m := validManifest()
			*at(m) = c.Value
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Unmarshal(b)
			if err == nil {
				err = got.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), field) || c.Value != "" && !strings.Contains(err.Error(), names.Allowed) {
				t.Errorf("%s %s %.80q: %v; want the %s refused by the name grammar", c.Kind, field, c.Value, err, field)
			}
		}
	}
}
