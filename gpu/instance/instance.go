// Package instance reads the instance YAML in which a user asks for a GPU
// driver (version, minimum CUDA, flavour) and describes the GPUs they expect,
// strictly: unknown fields and wrong types are errors naming the file, the
// line and the field path.
//
//	resources:
//	  gpu:
//	    type: v100        # informational name; checked against what is present
//	    count: 4
//	  driver:
//	    version: 450.80.02   # exact version, a branch ("535"), or "latest"
//	    cuda: 11.0           # minimum CUDA the workload needs
//	    flavor: auto         # open | proprietary | auto
package instance

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Flavours a request may name.
const (
	FlavorAuto        = "auto"
	FlavorOpen        = "open"
	FlavorProprietary = "proprietary"
)

// Latest is the version request for the newest cached version.
const Latest = "latest"

// Instance is a parsed instance YAML.
type Instance struct {
	Resources Resources `json:"resources"`
}

// Resources is the resources: section.
type Resources struct {
	GPU    GPU    `json:"gpu"`
	Driver Driver `json:"driver"`
}

// GPU is what the user expects to find; mismatches are warnings, not failures.
type GPU struct {
	// Type is an informational name such as "v100" or "h200"; "" when not given.
	Type string `json:"type,omitempty"`
	// Count is the number of GPUs expected; 0 when not given.
	Count int `json:"count,omitempty"`
}

// Driver is the driver request.
type Driver struct {
	// Version is an exact version ("535.261.03"), a branch or version prefix
	// ("535"), or "latest"; "" means latest.
	Version string `json:"version,omitempty"`
	// CUDA is the minimum CUDA version as written ("11.0", "12.2"); "" for none.
	CUDA string `json:"cuda,omitempty"`
	// Flavor is open, proprietary or auto; "" means auto.
	Flavor string `json:"flavor,omitempty"`
}

// WantVersion is the version rule: Version, or "latest" when unset.
func (d Driver) WantVersion() string {
	if d.Version == "" {
		return Latest
	}
	return d.Version
}

// WantFlavor is the flavour rule: Flavor, or "auto" when unset.
func (d Driver) WantFlavor() string {
	if d.Flavor == "" {
		return FlavorAuto
	}
	return d.Flavor
}

// ReadFile reads and parses an instance YAML file.
func ReadFile(path string) (*Instance, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("instance: %w", err)
	}
	return Parse(path, b)
}

// Parse parses an instance YAML; name labels errors (a file name, or where the
// YAML came from). Every problem found is reported, one per line, as
// "name:line: field.path: what is wrong".
func Parse(name string, data []byte) (*Instance, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &parser{name: name}
	in := &Instance{}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return in, nil // empty document: all defaults
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return in, nil
	}
	p.mapping(root, "", map[string]func(*yaml.Node, string){
		"resources": func(n *yaml.Node, path string) {
			p.mapping(n, path, map[string]func(*yaml.Node, string){
				"gpu": func(n *yaml.Node, path string) {
					p.mapping(n, path, map[string]func(*yaml.Node, string){
						"type": func(n *yaml.Node, path string) {
							in.Resources.GPU.Type = p.scalar(n, path, "a GPU name such as v100", "!!str", "!!int")
						},
						"count": func(n *yaml.Node, path string) {
							s := p.scalar(n, path, "a whole number of GPUs", "!!int")
							if s == "" {
								return
							}
							c, err := strconv.Atoi(s)
							if err != nil || c < 0 {
								p.errorf(n, path, "want a whole number of GPUs >= 0, got %q", n.Value)
								return
							}
							in.Resources.GPU.Count = c
						},
					})
				},
				"driver": func(n *yaml.Node, path string) {
					p.mapping(n, path, map[string]func(*yaml.Node, string){
						"version": func(n *yaml.Node, path string) {
							v := p.scalar(n, path, `a version ("535.261.03"), a branch ("535") or "latest"`, "!!str", "!!int", "!!float")
							if v != "" {
								if err := CheckVersion(v); err != nil {
									p.errorf(n, path, "%v", err)
									return
								}
							}
							in.Resources.Driver.Version = v
						},
						"cuda": func(n *yaml.Node, path string) {
							// cuda: 11.0 is a YAML float; its text keeps the ".0".
							v := p.scalar(n, path, `a CUDA version such as 12.2`, "!!str", "!!int", "!!float")
							if v == "" {
								return
							}
							if _, err := MinDriverForCUDA(v); err != nil {
								p.errorf(n, path, "%v", err)
								return
							}
							in.Resources.Driver.CUDA = v
						},
						"flavor": func(n *yaml.Node, path string) {
							v := p.scalar(n, path, "open, proprietary or auto", "!!str")
							switch v {
							case "", FlavorAuto, FlavorOpen, FlavorProprietary:
								in.Resources.Driver.Flavor = v
							default:
								p.errorf(n, path, "want open, proprietary or auto, got %q", v)
							}
						},
					})
				},
			})
		},
	})
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return in, nil
}

type parser struct {
	name string
	errs []error
}

func (p *parser) errorf(n *yaml.Node, path, format string, args ...any) {
	where := p.name + ":" + strconv.Itoa(n.Line)
	if path != "" {
		where += ": " + path
	}
	p.errs = append(p.errs, fmt.Errorf("%s: %s", where, fmt.Sprintf(format, args...)))
}

// mapping walks a mapping node, calling fields[key] for each known key and
// reporting unknown and duplicate keys. A null value (an empty section) is
// accepted as empty.
func (p *parser) mapping(n *yaml.Node, path string, fields map[string]func(*yaml.Node, string)) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, path, "want a mapping with %s, got %s", keyList(fields), describe(n))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		sub := k.Value
		if path != "" {
			sub = path + "." + k.Value
		}
		f, ok := fields[k.Value]
		if !ok {
			p.errorf(k, sub, "unknown field (known here: %s)", keyList(fields))
			continue
		}
		if seen[k.Value] {
			p.errorf(k, sub, "given twice")
			continue
		}
		seen[k.Value] = true
		f(v, sub)
	}
}

// scalar returns a scalar's text when its tag is one of tags; null gives "".
func (p *parser) scalar(n *yaml.Node, path, want string, tags ...string) string {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return ""
	}
	if n.Kind == yaml.ScalarNode {
		for _, t := range tags {
			if n.Tag == t {
				return n.Value
			}
		}
	}
	p.errorf(n, path, "want %s, got %s", want, describe(n))
	return ""
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	kind := strings.TrimPrefix(n.Tag, "!!")
	switch kind {
	case "str":
		kind = "string"
	case "bool":
		kind = "boolean"
	case "int":
		kind = "integer"
	}
	return fmt.Sprintf("%s %q", kind, n.Value)
}

func keyList(fields map[string]func(*yaml.Node, string)) string {
	// Fixed order for stable messages.
	var keys []string
	for _, k := range []string{"resources", "gpu", "driver", "type", "count", "version", "cuda", "flavor"} {
		if _, ok := fields[k]; ok {
			keys = append(keys, k)
		}
	}
	return strings.Join(keys, ", ")
}

// CheckVersion checks a version request: "latest", or dot-separated numbers
// ("535", "535.261.03", "1.0.0").
func CheckVersion(v string) error {
	if v == Latest {
		return nil
	}
	if _, err := ParseVersion(v); err != nil {
		return fmt.Errorf(`want a version ("535.261.03"), a branch ("535") or "latest", got %q`, v)
	}
	return nil
}

// ParseVersion splits a dotted version into numbers.
func ParseVersion(v string) ([]int, error) {
	if v == "" {
		return nil, errors.New("empty version")
	}
	parts := strings.Split(v, ".")
	out := make([]int, len(parts))
	for i, s := range parts {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || s == "" || s[0] == '+' {
			return nil, fmt.Errorf("version %q: %q is not a number", v, s)
		}
		out[i] = n
	}
	return out, nil
}

// CompareVersions compares dotted numeric versions (missing parts count as 0);
// non-numeric versions compare as strings, after numeric ones.
func CompareVersions(a, b string) int {
	va, errA := ParseVersion(a)
	vb, errB := ParseVersion(b)
	switch {
	case errA != nil && errB != nil:
		return strings.Compare(a, b)
	case errA != nil:
		return 1
	case errB != nil:
		return -1
	}
	for i := 0; i < max(len(va), len(vb)); i++ {
		x, y := 0, 0
		if i < len(va) {
			x = va[i]
		}
		if i < len(vb) {
			y = vb[i]
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// cudaMinimum is the minimum Linux driver for each CUDA release (NVIDIA's CUDA
// toolkit release notes, table 3), by major or by major.minor.
var cudaMinimum = []struct{ cuda, driver string }{
	{"13", "580.65.06"},
	{"12", "525.60.13"},
	{"11", "450.80.02"},
	{"10.2", "440.33"},
	{"10.1", "418.39"},
	{"10.0", "410.48"},
}

// MinDriverForCUDA returns the minimum driver version for a CUDA version
// ("11.0", "12", "12.2", "10.1").
func MinDriverForCUDA(cuda string) (string, error) {
	v, err := ParseVersion(cuda)
	if err != nil || len(v) > 3 {
		return "", fmt.Errorf("want a CUDA version such as 12.2, got %q", cuda)
	}
	minor := 0
	if len(v) > 1 {
		minor = v[1]
	}
	for _, m := range cudaMinimum {
		mv, _ := ParseVersion(m.cuda)
		if mv[0] != v[0] {
			continue
		}
		if len(mv) == 1 || mv[1] == minor {
			return m.driver, nil
		}
	}
	return "", fmt.Errorf("no known minimum driver for CUDA %s (known: 10.0, 10.1, 10.2, 11.x, 12.x, 13.x)", cuda)
}
