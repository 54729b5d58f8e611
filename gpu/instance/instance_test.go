package instance_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/gpu/instance"
)

func TestParseIssueShape(t *testing.T) {
	doc := `resources:
  gpu:
    type: v100        # informational name; checked against what is present
    count: 4
  driver:
    version: 450.80.02   # exact version, a branch ("535"), or "latest"
    cuda: 11.0           # minimum CUDA the workload needs
    flavor: auto         # open | proprietary | auto
`
	got, err := instance.Parse("i.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := &instance.Instance{Resources: instance.Resources{
		GPU:    instance.GPU{Type: "v100", Count: 4},
		Driver: instance.Driver{Version: "450.80.02", CUDA: "11.0", Flavor: "auto"},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse = %+v, want %+v", got, want)
	}
}

func TestParseValues(t *testing.T) {
	tests := []struct {
		doc  string
		want instance.Driver
		gpu  instance.GPU
	}{
		{"", instance.Driver{}, instance.GPU{}},
		{"resources:\n", instance.Driver{}, instance.GPU{}},
		{"resources:\n  driver:\n    version: 535\n", instance.Driver{Version: "535"}, instance.GPU{}},
		{"resources:\n  driver:\n    version: \"535\"\n    cuda: \"12.2\"\n", instance.Driver{Version: "535", CUDA: "12.2"}, instance.GPU{}},
		{"resources:\n  driver:\n    version: latest\n    cuda: 12\n    flavor: open\n", instance.Driver{Version: "latest", CUDA: "12", Flavor: "open"}, instance.GPU{}},
		// A float keeps its text: 11.0 stays "11.0", 12.10 stays "12.10".
		{"resources:\n  driver:\n    cuda: 11.0\n", instance.Driver{CUDA: "11.0"}, instance.GPU{}},
		{"resources:\n  driver:\n    cuda: 12.10\n    cuda_compat: minor\n", instance.Driver{CUDA: "12.10", CUDACompat: "minor"}, instance.GPU{}},
		{"resources:\n  driver:\n    version: 2.0.0\n", instance.Driver{Version: "2.0.0"}, instance.GPU{}},
		{"resources:\n  gpu:\n    type: 4090\n    count: 0\n", instance.Driver{}, instance.GPU{Type: "4090"}},
	}
	for _, tt := range tests {
		got, err := instance.Parse("x.yaml", []byte(tt.doc))
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.doc, err)
			continue
		}
		if got.Resources.Driver != tt.want || !reflect.DeepEqual(got.Resources.GPU, tt.gpu) {
			t.Errorf("Parse(%q) = %+v, want driver %+v gpu %+v", tt.doc, got.Resources, tt.want, tt.gpu)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		doc  string
		want []string
	}{
		{"resources:\n  driver:\n    verison: 535\n", []string{"f.yaml:3: resources.driver.verison: unknown field (known here: version, cuda, cuda_compat, flavor)"}},
		{"resource:\n  gpu: {}\n", []string{"f.yaml:1: resource: unknown field (known here: resources)"}},
		{"resources:\n  gpu:\n    count: four\n", []string{`f.yaml:3: resources.gpu.count: want a whole number of GPUs, got string "four"`}},
		{"resources:\n  gpu:\n    count: -2\n", []string{`f.yaml:3: resources.gpu.count: want a whole number of GPUs >= 0, got "-2"`}},
		{"resources:\n  gpu:\n    type: [a, b]\n", []string{"f.yaml:3: resources.gpu.type: want a GPU name such as v100, got a list"}},
		{"resources:\n  driver:\n    version: true\n", []string{`f.yaml:3: resources.driver.version: want a version ("535.261.03"), a branch ("535") or "latest", got boolean "true"`}},
		{"resources:\n  driver:\n    version: newest\n", []string{`f.yaml:3: resources.driver.version: want a version ("535.261.03"), a branch ("535") or "latest", got "newest"`}},
		{"resources:\n  driver:\n    cuda: 9.2\n", []string{"f.yaml:3: resources.driver.cuda: no known minimum driver for CUDA 9.2"}},
		{"resources:\n  driver:\n    cuda: eleven\n", []string{`f.yaml:3: resources.driver.cuda: want a CUDA version such as 12.4, got "eleven"`}},
		{"resources:\n  driver:\n    flavor: closed\n", []string{`f.yaml:3: resources.driver.flavor: want open, proprietary or auto, got "closed"`}},
		{"resources:\n  driver: 535\n", []string{`f.yaml:2: resources.driver: want a mapping with version, cuda, cuda_compat, flavor, got integer "535"`}},
		{"resources:\n  driver:\n    version: 1\n    version: 2\n", []string{"f.yaml:4: resources.driver.version: given twice"}},
		{"- a\n", []string{"f.yaml:1: want a mapping with resources, got a list"}},
		{"resources: [\n", []string{"f.yaml: yaml: line 1"}},
		{"resources:\n  gpu:\n    sharing:\n      strategy: vgpu\n      replicas: 4\n", []string{`f.yaml:4: resources.gpu.sharing.strategy: want time-slicing or mps, got "vgpu"`}},
		{"resources:\n  gpu:\n    sharing:\n      strategy: mps\n      replicas: 1\n", []string{`f.yaml:5: resources.gpu.sharing.replicas: want a whole number of replicas per GPU from 2 to 64, got "1"`}},
		{"resources:\n  gpu:\n    sharing:\n      replicas: 4\n", []string{"f.yaml:4: resources.gpu.sharing: strategy is missing (time-slicing or mps)"}},
		{"resources:\n  gpu:\n    sharing: {strategy: mps}\n", []string{"f.yaml:3: resources.gpu.sharing: replicas is missing"}},
		{"resources:\n  gpu:\n    sharing: {strategy: mps, replicas: 2, slices: 3}\n", []string{"f.yaml:3: resources.gpu.sharing.slices: unknown field (known here: strategy, replicas)"}},
		{"resources:\n  gpu:\n    mig: 1g.18gb\n", []string{`f.yaml:3: resources.gpu.mig: want all-disabled, all-enabled, all-balanced or all-<profile> such as all-1g.18gb, got "1g.18gb"`}},
		{"resources:\n  gpu:\n    mig: all-8g.1gb\n", []string{`resources.gpu.mig: want all-disabled`}},
		// Every problem is reported, each with its line.
		{"resources:\n  gpu:\n    count: x\n  driver:\n    flavor: y\n    foo: 1\n", []string{
			"f.yaml:3: resources.gpu.count:", "f.yaml:5: resources.driver.flavor:", "f.yaml:6: resources.driver.foo: unknown field"}},
	}
	for _, tt := range tests {
		_, err := instance.Parse("f.yaml", []byte(tt.doc))
		if err == nil {
			t.Errorf("Parse(%q) = nil error, want %q", tt.doc, tt.want)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Parse(%q) error:\n%v\nwant it to contain %q", tt.doc, err, w)
			}
		}
	}
}

func TestParseSharingAndMIG(t *testing.T) {
	for _, tt := range []struct {
		doc  string
		want instance.GPU
	}{
		{"resources:\n  gpu:\n    sharing:\n      strategy: time-slicing\n      replicas: 4\n",
			instance.GPU{Sharing: &instance.Sharing{Strategy: "time-slicing", Replicas: 4}}},
		{"resources:\n  gpu:\n    type: h200\n    sharing: {strategy: mps, replicas: 8}\n    mig: all-1g.18gb\n",
			instance.GPU{Type: "h200", Sharing: &instance.Sharing{Strategy: "mps", Replicas: 8}, MIG: "all-1g.18gb"}},
		{"resources:\n  gpu:\n    mig: all-1g.18gb+me\n", instance.GPU{MIG: "all-1g.18gb+me"}},
		{"resources:\n  gpu:\n    mig: all-balanced\n", instance.GPU{MIG: "all-balanced"}},
		{"resources:\n  gpu:\n    mig: all-disabled\n", instance.GPU{MIG: "all-disabled"}},
	} {
		got, err := instance.Parse("f.yaml", []byte(tt.doc))
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.doc, err)
			continue
		}
		if !reflect.DeepEqual(got.Resources.GPU, tt.want) {
			t.Errorf("Parse(%q).GPU = %+v, want %+v", tt.doc, got.Resources.GPU, tt.want)
		}
	}
}

func TestMinDriverForCUDA(t *testing.T) {
	for _, tt := range []struct{ cuda, want string }{
		{"13.0", "580.65.06"}, {"13", "580.65.06"}, {"12.2", "535.54.03"}, {"12", "525.60.13"},
		{"12.0", "525.60.13"}, {"12.1", "530.30.02"}, {"12.3", "545.23.06"}, {"12.4", "550.54.14"},
		{"12.5", "555.42.02"}, {"12.6", "560.28.03"}, {"12.7", ""}, {"12.8", "570.26"}, {"12.9", "575.51.03"}, {"13.1", ""},
		{"11.0", "450.80.02"}, {"11.8", "450.80.02"}, {"10.2", "440.33"}, {"10.1", "418.39"},
		{"10.0", "410.48"}, {"10", "410.48"}, {"10.3", ""}, {"9.2", ""}, {"14.0", ""}, {"x", ""},
	} {
		got, err := instance.MinDriverForCUDA(tt.cuda)
		if got != tt.want || (err == nil) != (tt.want != "") {
			t.Errorf("MinDriverForCUDA(%q) = %q, %v; want %q", tt.cuda, got, err, tt.want)
		}
	}
}

func TestCUDAMinimum(t *testing.T) {
	for _, tt := range []struct {
		cuda, compat, driver, rule, alt string
		err                             bool
	}{
		{cuda: "12.4", driver: "550.54.14", rule: "CUDA 12.4 toolkit minimum", alt: "525.60.13"},
		{cuda: "12.4", compat: "minor", driver: "525.60.13", rule: "minor-version compatibility, CUDA 12.x family minimum"},
		{cuda: "12.0", driver: "525.60.13", rule: "CUDA 12.0 toolkit minimum"},
		{cuda: "12.7", err: true},
		{cuda: "12.7", compat: "minor", driver: "525.60.13", rule: "minor-version compatibility, CUDA 12.x family minimum"},
		{cuda: "13.0", driver: "580.65.06", rule: "CUDA 13.0 toolkit minimum"},
		{cuda: "11.0", driver: "450.80.02", rule: "CUDA 11.x minimum"},
		{cuda: "11.8", compat: "minor", driver: "450.80.02", rule: "CUDA 11.x minimum"},
		{cuda: "10.1", compat: "minor", driver: "418.39", rule: "CUDA 10.1 toolkit minimum"},
		{cuda: "12.4", compat: "major", err: true},
	} {
		got, err := instance.CUDAMinimum(tt.cuda, tt.compat)
		if tt.err {
			if err == nil {
				t.Errorf("CUDAMinimum(%q, %q) = %+v, want an error", tt.cuda, tt.compat, got)
			}
			continue
		}
		if err != nil || got.Driver != tt.driver || got.Rule != tt.rule || got.Compat != tt.alt {
			t.Errorf("CUDAMinimum(%q, %q) = %+v, %v; want driver %s rule %q compat %q", tt.cuda, tt.compat, got, err, tt.driver, tt.rule, tt.alt)
		}
	}
}

func TestParseCUDACompat(t *testing.T) {
	for _, tt := range []struct {
		yaml, err string
		compat    string
	}{
		{yaml: "resources:\n  driver:\n    cuda: 12.4\n    cuda_compat: minor\n", compat: "minor"},
		{yaml: "resources:\n  driver:\n    cuda: 12.7\n", err: "x.yaml:3: resources.driver.cuda: no known toolkit minimum driver for CUDA 12.7"},
		{yaml: "resources:\n  driver:\n    cuda: 12.7\n    cuda_compat: minor\n", compat: "minor"},
		{yaml: "resources:\n  driver:\n    cuda_compat: major\n", err: "x.yaml:3: resources.driver.cuda_compat: want \"minor\""},
	} {
		in, err := instance.Parse("x.yaml", []byte(tt.yaml))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Parse(%q) error = %v, want it to contain %q", tt.yaml, err, tt.err)
			}
			continue
		}
		if err != nil || in.Resources.Driver.CUDACompat != tt.compat {
			t.Errorf("Parse(%q) = %+v, %v; want cuda_compat %q", tt.yaml, in, err, tt.compat)
		}
	}
}

func TestCompareVersions(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"535.261.03", "535.216.03", 1}, {"470.256.02", "535.216.03", -1}, {"450.80.02", "450.80.02", 0},
		{"10.0", "10", 0}, {"2.0.0", "1.0.0", 1}, {"525.60.13", "525.147.05", -1}, {"abc", "1", 1},
	} {
		if got := instance.CompareVersions(tt.a, tt.b); got != tt.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

// flags makes a kernel command line lookup from name=value pairs.
func flags(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(n string) (string, bool) { v, ok := m[n]; return v, ok }
}

// reader is a fw_cfg File read by a function that returns data, err.
func reader(data string, err error) instance.File {
	return instance.File{Source: instance.SourceFwCfg, Path: "fw_cfg " + instance.FwCfgName, Read: func() ([]byte, error) {
		if err != nil {
			return nil, err
		}
		return []byte(data), nil
	}}
}

func TestFindPrecedence(t *testing.T) {
	dir := t.TempDir()
	fw := filepath.Join(dir, "fw_cfg.yaml")
	img := filepath.Join(dir, "image.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(fw, "resources:\n  driver:\n    version: 2.0.0\n")
	write(img, "resources:\n  driver:\n    version: 535\n    flavor: open\n")
	write(bad, "resources:\n  driver:\n    versoin: 1\n")
	files := []instance.File{{Source: instance.SourceFwCfg, Path: fw}, {Source: instance.SourceImage, Path: img}}
	b64 := base64.StdEncoding.EncodeToString([]byte("resources:\n  driver:\n    version: 470\n    cuda: 11.0\n"))

	tests := []struct {
		name      string
		flag      func(string) (string, bool)
		files     []instance.File
		source    string
		want      instance.Driver
		errSubstr string
	}{
		{"cmdline driver wins", flags("kpreload.driver", "1.0.0"), files, instance.SourceCmdline, instance.Driver{Version: "1.0.0"}, ""},
		{"cmdline flavor alone", flags("kpreload.flavor", "open"), files, instance.SourceCmdline, instance.Driver{Flavor: "open"}, ""},
		{"cmdline base64 instance", flags("kpreload.instance", b64), files, instance.SourceCmdline, instance.Driver{Version: "470", CUDA: "11.0"}, ""},
		{"cmdline driver overrides instance", flags("kpreload.instance", b64, "kpreload.driver", "535"), files, instance.SourceCmdline, instance.Driver{Version: "535", CUDA: "11.0"}, ""},
		{"fw_cfg next", flags(), files, instance.SourceFwCfg, instance.Driver{Version: "2.0.0"}, ""},
		{"image after fw_cfg", flags(), files[1:], instance.SourceImage, instance.Driver{Version: "535", Flavor: "open"}, ""},
		{"missing files skipped", flags(), []instance.File{{Source: instance.SourceFwCfg, Path: filepath.Join(dir, "none")}, files[1]}, instance.SourceImage, instance.Driver{Version: "535", Flavor: "open"}, ""},
		{"default", flags(), nil, instance.SourceDefault, instance.Driver{}, ""},
		{"bad cmdline falls through", flags("kpreload.driver", "newest"), files, instance.SourceFwCfg, instance.Driver{Version: "2.0.0"}, "kpreload.driver=newest"},
		{"bad cmdline flavor falls through", flags("kpreload.flavor", "opne"), files, instance.SourceFwCfg, instance.Driver{Version: "2.0.0"}, `kpreload.flavor=opne: want open, proprietary or auto, got "opne"`},
		{"bad base64", flags("kpreload.instance", "!!"), nil, instance.SourceDefault, instance.Driver{}, "not base64"},
		{"reader instead of the path", flags(), []instance.File{reader("resources:\n  driver:\n    version: 3.0.0\n", nil), files[1]}, instance.SourceFwCfg, instance.Driver{Version: "3.0.0"}, ""},
		{"reader: absent", flags(), []instance.File{reader("", fmt.Errorf("fw_cfg: x: %w", fs.ErrNotExist)), files[1]}, instance.SourceImage, instance.Driver{Version: "535", Flavor: "open"}, ""},
		{"reader fails", flags(), []instance.File{reader("", errors.New("ioperm: operation not permitted")), files[1]}, instance.SourceImage, instance.Driver{Version: "535", Flavor: "open"}, "from fw_cfg ignored: ioperm"},
		{"bad file falls through", flags(), []instance.File{{Source: instance.SourceFwCfg, Path: bad}, files[1]}, instance.SourceImage, instance.Driver{Version: "535", Flavor: "open"}, bad + ":3: resources.driver.versoin"},
	}
	for _, tt := range tests {
		got, errs := instance.Find(tt.flag, tt.files)
		if got.Source != tt.source || got.Instance.Resources.Driver != tt.want {
			t.Errorf("%s: Find = %s %+v, want %s %+v", tt.name, got.Source, got.Instance.Resources.Driver, tt.source, tt.want)
		}
		if tt.errSubstr == "" && len(errs) > 0 || tt.errSubstr != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), tt.errSubstr)) {
			t.Errorf("%s: errors %v, want %q", tt.name, errs, tt.errSubstr)
		}
	}
}

// TestCheckFlavor: the one flavour grammar (instance YAML, kernel command
// line, kpreload switch --flavor).
func TestCheckFlavor(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"open", ""},
		{"proprietary", ""},
		{"auto", ""},
		{"opne", `want open, proprietary or auto, got "opne"`},
		{"", `want open, proprietary or auto, got ""`},
		{"Open", `want open, proprietary or auto, got "Open"`},
		{"open\x1b[2J", `want open, proprietary or auto, got "open\x1b[2J"`},
	} {
		got := ""
		if err := instance.CheckFlavor(tc.in); err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("CheckFlavor(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
