// Package instance reads the instance YAML in which a user asks for a GPU
// driver (version, minimum CUDA, flavour) and describes the GPUs they expect,
// strictly: unknown fields and wrong types are errors naming the file, the
// line and the field path.
//
//	resources:
//	  gpu:
//	    type: v100        # informational name; checked against what is present
//	    count: 4
//	    sharing:          # how Kubernetes shares each GPU (NVIDIA device plugin)
//	      strategy: time-slicing   # or mps
//	      replicas: 4
//	    mig: all-1g.18gb  # MIG layout for mig-manager (all-disabled, all-balanced, all-<profile>)
//	  driver:
//	    version: 450.80.02   # exact version, a branch ("535"), or "latest"
//	    cuda: 11.0           # minimum CUDA the workload needs
//	    flavor: auto         # open | proprietary | auto
package instance

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/kpreload/kpreload/kmodcache/names"
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
	// Sharing says how Kubernetes shares each GPU; nil when not given.
	Sharing *Sharing `json:"sharing,omitempty"`
	// MIG names the MIG layout for the NVIDIA MIG manager ("all-1g.18gb",
	// "all-balanced", "all-disabled"); "" when not given. kpreload never
	// changes MIG mode itself.
	MIG string `json:"mig,omitempty"`
}

// Sharing strategies (the NVIDIA device plugin's names).
const (
	SharingTimeSlicing = "time-slicing"
	SharingMPS         = "mps"
)

// Sharing is the gpu.sharing section: each GPU offered Replicas times to
// Kubernetes, by time-slicing or through MPS.
type Sharing struct {
	Strategy string `json:"strategy"`
	Replicas int    `json:"replicas"`
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
	// CUDACompat is CUDACompatMinor to accept the CUDA family minimum driver
	// (minor-version compatibility) instead of the toolkit's own; "" for none.
	CUDACompat string `json:"cuda_compat,omitempty"`
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
	b, err := ReadPath(path)
	if err != nil {
		return nil, fmt.Errorf("instance: %w", err)
	}
	return Parse(path, b)
}

// Parse parses an instance YAML; name labels errors (a file name, or where the
// YAML came from). Every problem found is reported, one per line, as
// "name:line: field.path: what is wrong".
func Parse(name string, data []byte) (*Instance, error) {
	return parse(name, data, nil)
}

// parse is Parse that also sets *versionLine (when not nil) to the line of
// resources.driver.version, or 0 when the YAML does not give one.
func parse(name string, data []byte, versionLine *int) (*Instance, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return &Instance{}, nil // empty document: all defaults
	}
	return parseNode(name, doc.Content[0], "", versionLine)
}

// parseNode parses an instance from the YAML node root; errors name name and
// the node's line, and field paths start with prefix ("" or "kpreload").
// *versionLine, when versionLine is not nil, is set to the line of
// resources.driver.version.
func parseNode(name string, root *yaml.Node, prefix string, versionLine *int) (*Instance, error) {
	p := &parser{name: name}
	var (
		cudaNode *yaml.Node
		cudaPath string
	)
	in := &Instance{}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return in, nil
	}
	p.mapping(root, prefix, map[string]func(*yaml.Node, string){
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
						"sharing": func(n *yaml.Node, path string) {
							sh := &Sharing{}
							sharingNode, sharingPath, before := n, path, len(p.errs)
							p.mapping(n, path, map[string]func(*yaml.Node, string){
								"strategy": func(n *yaml.Node, path string) {
									v := p.scalar(n, path, "time-slicing or mps", "!!str")
									switch v {
									case SharingTimeSlicing, SharingMPS:
										sh.Strategy = v
									case "":
									default:
										p.errorf(n, path, "want time-slicing or mps, got %q", v)
									}
								},
								"replicas": func(n *yaml.Node, path string) {
									s := p.scalar(n, path, "a whole number of replicas per GPU", "!!int")
									if s == "" {
										return
									}
									r, err := strconv.Atoi(s)
									if err != nil || r < 2 || r > MaxReplicas {
										p.errorf(n, path, "want a whole number of replicas per GPU from 2 to %d, got %q", MaxReplicas, n.Value)
										return
									}
									sh.Replicas = r
								},
							})
							if sharingNode.Kind == yaml.MappingNode && len(p.errs) == before {
								if sh.Strategy == "" {
									p.errorf(sharingNode, sharingPath, "strategy is missing (time-slicing or mps)")
								}
								if sh.Replicas == 0 {
									p.errorf(sharingNode, sharingPath, "replicas is missing (how many workloads share each GPU, 2 to %d)", MaxReplicas)
								}
							}
							if sh.Strategy != "" && sh.Replicas != 0 {
								in.Resources.GPU.Sharing = sh
							}
						},
						"mig": func(n *yaml.Node, path string) {
							v := p.scalar(n, path, `a MIG layout such as all-1g.18gb, all-balanced or all-disabled`, "!!str")
							if v == "" {
								return
							}
							if err := CheckMIG(v); err != nil {
								p.errorf(n, path, "%v", err)
								return
							}
							in.Resources.GPU.MIG = v
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
							if versionLine != nil && v != "" {
								*versionLine = n.Line
							}
						},
						"cuda": func(n *yaml.Node, path string) {
							// cuda: 11.0 is a YAML float; its text keeps the ".0".
							v := p.scalar(n, path, `a CUDA version such as 12.2`, "!!str", "!!int", "!!float")
							if v == "" {
								return
							}
							if _, err := CUDAMinimum(v, CUDACompatMinor); err != nil {
								p.errorf(n, path, "%v", err)
								return
							}
							in.Resources.Driver.CUDA = v
							cudaNode, cudaPath = n, path
						},
						"cuda_compat": func(n *yaml.Node, path string) {
							v := p.scalar(n, path, `"minor" (CUDA minor-version compatibility)`, "!!str")
							switch v {
							case "", CUDACompatMinor:
								in.Resources.Driver.CUDACompat = v
							default:
								p.errorf(n, path, "want %q (accept the CUDA family minimum driver under minor-version compatibility), got %q", CUDACompatMinor, v)
							}
						},
						"flavor": func(n *yaml.Node, path string) {
							v := p.scalar(n, path, "open, proprietary or auto", "!!str")
							if err := CheckFlavor(v); v != "" && err != nil {
								p.errorf(n, path, "%v", err)
								return
							}
							in.Resources.Driver.Flavor = v
						},
					})
				},
			})
		},
	})
	if d := in.Resources.Driver; cudaNode != nil && len(p.errs) == 0 {
		// Checked once cuda_compat is known: 12.7 has no toolkit minimum, but
		// is fine under minor-version compatibility.
		if _, err := CUDAMinimum(d.CUDA, d.CUDACompat); err != nil {
			p.errorf(cudaNode, cudaPath, "%v", err)
		}
	}
	if len(p.errs) > 0 {
		return nil, joinProblems(p.errs)
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
		where += ": " + quoteUnprintable(path)
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
	return fmt.Sprintf("%s %q", quoteUnprintable(kind), n.Value)
}

// quoteUnprintable quotes s when it holds a newline or another unprintable
// character: keys and tags are the user's text, and every problem must stay
// on its own line.
func quoteUnprintable(s string) string {
	if strings.ContainsFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

func keyList(fields map[string]func(*yaml.Node, string)) string {
	// Fixed order for stable messages.
	var keys []string
	for _, k := range []string{"resources", "gpu", "driver", "type", "count", "sharing", "mig", "strategy", "replicas", "version", "cuda", "cuda_compat", "flavor"} {
		if _, ok := fields[k]; ok {
			keys = append(keys, k)
		}
	}
	return strings.Join(keys, ", ")
}

// MaxReplicas is the most replicas per GPU a sharing request may ask for.
const MaxReplicas = 64

// MIG layouts that name no profile.
const (
	MIGDisabled = "all-disabled"
	MIGEnabled  = "all-enabled"
	MIGBalanced = "all-balanced"
)

// migProfile matches a MIG profile name: "1g.18gb", "1g.18gb+me", "7g.141gb".
var migProfile = regexp.MustCompile(`^[1-7]g\.[0-9]+gb(\+me)?$`)

// CheckMIG checks the form of a gpu.mig request: all-disabled, all-enabled,
// all-balanced or all-<profile> (the NVIDIA MIG manager's config names).
// Whether the GPUs present can take it is decided at boot (gpu/mig).
func CheckMIG(v string) error {
	switch v {
	case MIGDisabled, MIGEnabled, MIGBalanced:
		return nil
	}
	if p, ok := strings.CutPrefix(v, "all-"); ok && migProfile.MatchString(p) {
		return nil
	}
	return fmt.Errorf("want all-disabled, all-enabled, all-balanced or all-<profile> such as all-1g.18gb, got %q", v)
}

// CheckFlavor checks a flavour request: open, proprietary or auto (the
// instance YAML's resources.driver.flavor, the kernel command line's
// kpreload.flavor and kpreload switch --flavor all take it).
func CheckFlavor(v string) error {
	switch v {
	case FlavorAuto, FlavorOpen, FlavorProprietary:
		return nil
	}
	got := fmt.Sprintf("%q", v)
	if len(v) > names.MaxLen {
		got = fmt.Sprintf("%.*q… (%d characters)", names.MaxLen, v, len(v))
	}
	return fmt.Errorf("want %s, %s or %s, got %s", FlavorOpen, FlavorProprietary, FlavorAuto, got)
}

// CheckVersion checks a version request: "latest", or dot-separated numbers
// ("535", "535.261.03", "1.0.0") that are a name (kmodcache/names: at most
// names.MaxLen characters).
func CheckVersion(v string) error {
	if v == Latest {
		return nil
	}
	if _, err := ParseVersion(v); err != nil || !names.Valid(v) {
		got := fmt.Sprintf("%q", v)
		if len(v) > names.MaxLen {
			got = fmt.Sprintf("%.*q… (%d characters, at most %d)", names.MaxLen, v, len(v), names.MaxLen)
		}
		return fmt.Errorf(`want a version ("535.261.03"), a branch ("535") or "latest", got %s`, got)
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

// CUDACompatMinor is the value of resources.driver.cuda_compat that opts into
// CUDA minor-version compatibility: a workload built with CUDA X.Y runs on any
// driver of the X.x family minimum (with the features of that driver).
const CUDACompatMinor = "minor"

// cudaToolkit is the minimum Linux driver each CUDA toolkit release was
// shipped with (NVIDIA's CUDA toolkit release notes, table 3: "CUDA Toolkit
// and Corresponding Driver Versions"). A workload built with that toolkit
// needs it unless it opts into minor-version compatibility.
var cudaToolkit = []struct{ cuda, driver string }{
	{"13.0", "580.65.06"},
	{"12.9", "575.51.03"},
	{"12.8", "570.26"},
	{"12.6", "560.28.03"},
	{"12.5", "555.42.02"},
	{"12.4", "550.54.14"},
	{"12.3", "545.23.06"},
	{"12.2", "535.54.03"},
	{"12.1", "530.30.02"},
	{"12.0", "525.60.13"},
	{"10.2", "440.33"},
	{"10.1", "418.39"},
	{"10.0", "410.48"},
}

// cudaFamily is the minimum driver of each CUDA major family under minor-version
// compatibility (NVIDIA's CUDA compatibility guide); 11.x uses it for every
// minor release, as kpreload always has.
var cudaFamily = []struct {
	major  int
	driver string
}{
	{13, "580.65.06"},
	{12, "525.60.13"},
	{11, "450.80.02"},
}

// CUDARequirement is the driver a CUDA request needs and the rule that says so.
type CUDARequirement struct {
	// CUDA is the request as written ("12.4").
	CUDA string `json:"cuda"`
	// Driver is the minimum driver version.
	Driver string `json:"driver"`
	// Rule names the rule: "toolkit minimum" or "minor-version compatibility".
	Rule string `json:"rule"`
	// Compat is the family minimum that cuda_compat: minor would accept
	// instead, when it is lower than Driver ("" otherwise).
	Compat string `json:"compat,omitempty"`
}

// String describes the requirement, such as "CUDA 12.4 needs driver >=
// 550.54.14 (toolkit minimum; cuda_compat: minor would accept >= 525.60.13)".
func (r CUDARequirement) String() string {
	s := fmt.Sprintf("CUDA %s needs driver >= %s (%s", r.CUDA, r.Driver, r.Rule)
	if r.Compat != "" {
		s += fmt.Sprintf("; resources.driver.cuda_compat: minor would accept >= %s", r.Compat)
	}
	return s + ")"
}

// CUDAMinimum returns what a workload built with CUDA cuda ("12.4", "11.0",
// "12") needs: the toolkit's own minimum driver, or with compat ==
// CUDACompatMinor the family minimum (12.x: 525.60.13). 11.x always takes the
// family minimum (450.80.02), and a bare major ("12") means its first release.
func CUDAMinimum(cuda, compat string) (CUDARequirement, error) {
	v, err := ParseVersion(cuda)
	if err != nil || len(v) > 3 {
		return CUDARequirement{}, fmt.Errorf("want a CUDA version such as 12.4, got %q", cuda)
	}
	switch compat {
	case "", CUDACompatMinor:
	default:
		return CUDARequirement{}, fmt.Errorf("cuda_compat %q: want %q (minor-version compatibility) or nothing", compat, CUDACompatMinor)
	}
	minor := 0
	if len(v) > 1 {
		minor = v[1]
	}
	req := CUDARequirement{CUDA: cuda}
	family := ""
	for _, f := range cudaFamily {
		if f.major == v[0] {
			family = f.driver
		}
	}
	toolkit := ""
	for _, m := range cudaToolkit {
		mv, _ := ParseVersion(m.cuda)
		if mv[0] == v[0] && mv[1] == minor {
			toolkit = m.driver
		}
	}
	switch {
	case v[0] == 11 && family != "":
		req.Driver, req.Rule = family, "CUDA 11.x minimum"
	case compat == CUDACompatMinor && family != "":
		req.Driver, req.Rule = family, fmt.Sprintf("minor-version compatibility, CUDA %d.x family minimum", v[0])
	case toolkit != "":
		req.Driver, req.Rule = toolkit, fmt.Sprintf("CUDA %d.%d toolkit minimum", v[0], minor)
		if family != "" && CompareVersions(family, toolkit) < 0 {
			req.Compat = family
		}
	case family != "":
		return CUDARequirement{}, fmt.Errorf("no known toolkit minimum driver for CUDA %s (known: %s); with resources.driver.cuda_compat: minor, the %d.x family minimum %s applies", cuda, knownCUDA(), v[0], family)
	default:
		return CUDARequirement{}, fmt.Errorf("no known minimum driver for CUDA %s (known: %s)", cuda, knownCUDA())
	}
	return req, nil
}

// knownCUDA lists the CUDA releases CUDAMinimum knows.
func knownCUDA() string {
	known := []string{"10.0", "10.1", "10.2", "11.x"}
	for i := len(cudaToolkit) - 1; i >= 0; i-- {
		if !strings.HasPrefix(cudaToolkit[i].cuda, "10.") {
			known = append(known, cudaToolkit[i].cuda)
		}
	}
	return strings.Join(known, ", ")
}

// MinDriverForCUDA returns the toolkit minimum driver version for a CUDA
// version ("11.0", "12", "12.4", "10.1"); see CUDAMinimum.
func MinDriverForCUDA(cuda string) (string, error) {
	r, err := CUDAMinimum(cuda, "")
	return r.Driver, err
}
