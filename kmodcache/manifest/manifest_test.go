package manifest

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

const (
	testKernel   = "6.1.0-56-cloud-amd64"
	testVermagic = "6.1.0-56-cloud-amd64 SMP preempt mod_unload modversions "
)

// digest returns a well-formed fake digest made of one repeated hex digit.
func digest(c byte) string { return strings.Repeat(string(c), 64) }

// validManifest is a small, valid two-module set: nvidia_drm needs nvidia (in
// the set) and drm_kms_helper (the kernel's).
func validManifest() *Manifest {
	return &Manifest{
		Format:   FormatVersion,
		Kernel:   testKernel,
		Vermagic: testVermagic,
		Driver:   "nvidia",
		Version:  "535.261.03",
		Flavor:   "open",
		Modules: []Module{
			{Name: "nvidia", File: "nvidia.ko", SHA256: digest('a'), Size: 100, ELFSize: 100, Vermagic: testVermagic,
				Aliases: []string{"pci:v000010DEd*sv*sd*bc03sc00i00*"}, Firmware: []string{"nvidia/535.261.03/gsp_ga10x.bin"}},
			{Name: "nvidia_drm", File: "nvidia-drm.ko", SHA256: digest('b'), Size: 50, ELFSize: 50, Vermagic: testVermagic,
				Depends: []string{"nvidia", "drm_kms_helper"}},
		},
		External: []string{"drm_kms_helper"},
		Firmware: []string{"nvidia/535.261.03/gsp_ga10x.bin"},
	}
}

func TestValidateValid(t *testing.T) {
	if err := validManifest().Validate(); err != nil {
		t.Errorf("Validate(valid manifest) = %v, want nil", err)
	}
}

func TestValidateErrors(t *testing.T) {
	tests := []struct {
		name   string
		change func(m *Manifest)
		want   []string // substrings of the problems, in order
	}{
		{"format", func(m *Manifest) { m.Format = 2 }, []string{"format 2, want 1"}},
		{"no kernel", func(m *Manifest) { m.Kernel = "" }, []string{"kernel release is empty", `vermagic "` + testVermagic + `" is for kernel "6.1.0-56-cloud-amd64", set is for ""`}},
		{"kernel with slash", func(m *Manifest) { m.Kernel = "../etc" }, []string{`kernel release "../etc" starts with '.': want 1 to 64 letters`, `set is for "../etc"`}},
		{"set vermagic other kernel", func(m *Manifest) {
			m.Vermagic = "6.12.117+deb12-cloud-amd64 SMP preempt mod_unload modversions "
			for i := range m.Modules {
				m.Modules[i].Vermagic = m.Vermagic
			}
		}, []string{`is for kernel "6.12.117+deb12-cloud-amd64", set is for "6.1.0-56-cloud-amd64"`}},
		{"empty vermagic", func(m *Manifest) { m.Vermagic = "" }, []string{"vermagic is empty", "module nvidia has vermagic", "module nvidia_drm has vermagic"}},
		{"module of another kernel", func(m *Manifest) {
			m.Modules[1].Vermagic = "6.12.117+deb12-cloud-amd64 SMP preempt mod_unload modversions "
		}, []string{`module nvidia_drm has vermagic "6.12.117+deb12-cloud-amd64 SMP preempt mod_unload modversions " (kernel 6.12.117+deb12-cloud-amd64), set has "` + testVermagic + `"`}},
		{"no driver", func(m *Manifest) { m.Driver = " " }, []string{"driver name is empty"}},
		{"verity without algorithm", func(m *Manifest) { m.Modules[0].Verity = strings.Repeat("ab", 32) }, []string{`module nvidia verity "` + strings.Repeat("ab", 32) + `" is not "sha256:" and 64 lowercase hex digits`}},
		{"no version", func(m *Manifest) { m.Version = "" }, []string{"driver version is empty"}},
		{"flavor with slash", func(m *Manifest) { m.Flavor = "a/b" }, []string{`flavor "a/b" holds '/': want 1 to 64 letters`}},
		// Names become directories (the driver's userspace, its firmware
		// in containers): none may climb out of one.
		{"version dot dot", func(m *Manifest) { m.Version = ".." }, []string{`driver version ".." starts with '.': want 1 to 64 letters, digits and ".+~_-"`}},
		{"version up to etc", func(m *Manifest) { m.Version = "../../../../etc" }, []string{`driver version "../../../../etc" starts with '.'`}},
		{"version with dot dot inside", func(m *Manifest) { m.Version = "535..261" }, []string{`driver version "535..261" holds ".."`}},
		{"version as an option", func(m *Manifest) { m.Version = "-rf" }, []string{`driver version "-rf" starts with '-'`}},
		{"driver dot dot", func(m *Manifest) { m.Driver = ".." }, []string{`driver name ".." starts with '.'`}},
		{"flavor dot dot", func(m *Manifest) { m.Flavor = ".." }, []string{`flavor ".." starts with '.'`}},
		{"kernel dot dot", func(m *Manifest) { m.Kernel = ".." }, []string{`kernel release ".." starts with '.'`, `set is for ".."`}},
		{"long version", func(m *Manifest) { m.Version = strings.Repeat("5", 65) }, []string{`driver version "` + strings.Repeat("5", 65) + `" is 65 bytes long`}},
		{"no modules", func(m *Manifest) { m.Modules = nil; m.External = nil; m.Firmware = nil }, []string{"no modules"}},
		{"duplicate name", func(m *Manifest) { m.Modules[1].Name = "nvidia"; m.Modules[1].Depends = nil }, []string{"module nvidia appears more than once"}},
		{"duplicate name dash", func(m *Manifest) {
			m.Modules[0].Name = "nvidia-drm"
			m.Modules[1].Depends = []string{"drm_kms_helper"}
		}, []string{"module nvidia_drm appears more than once"}},
		{"bad name", func(m *Manifest) { m.Modules[0].Name = "nv idia"; m.Modules[1].Depends = nil; m.External = nil }, []string{`module name "nv idia" is not a kernel module name`}},
		{"duplicate file", func(m *Manifest) { m.Modules[1].File = "nvidia.ko" }, []string{"file nvidia.ko appears more than once"}},
		{"file with path", func(m *Manifest) { m.Modules[0].File = "../nvidia.ko" }, []string{`module nvidia file name "../nvidia.ko" is not a plain file name`}},
		{"bad digest", func(m *Manifest) { m.Modules[0].SHA256 = strings.ToUpper(digest('a')) }, []string{`module nvidia sha256 "AAAA`}},
		{"bad size", func(m *Manifest) { m.Modules[0].Size = 0 }, []string{"module nvidia size 0 is not positive"}},
		{"bad compression", func(m *Manifest) { m.Modules[0].Compression = "bz2" }, []string{`module nvidia compression "bz2" is not one of`}},
		{"unresolved depend", func(m *Manifest) { m.External = nil }, []string{"module nvidia_drm depends on drm_kms_helper, which is neither in the set nor listed as external"}},
		{"external in set", func(m *Manifest) { m.External = append(m.External, "nvidia") }, []string{"module nvidia is listed as external but is part of the set"}},
		{"firmware not listed", func(m *Manifest) { m.Firmware = nil }, []string{"module nvidia requests firmware nvidia/535.261.03/gsp_ga10x.bin, which the set's firmware list lacks"}},
		{"cycle", func(m *Manifest) { m.Modules[0].Depends = []string{"nvidia_drm"} }, []string{"dependency cycle: nvidia -> nvidia_drm -> nvidia"}},
		{"self cycle", func(m *Manifest) { m.Modules[0].Depends = []string{"nvidia"} }, []string{"dependency cycle: nvidia -> nvidia"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := validManifest()
			tt.change(m)
			err := m.Validate()
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate() = %v, want a *ValidationError", err)
			}
			if len(ve.Problems) != len(tt.want) {
				t.Errorf("Validate() problems = %q, want %d problems matching %q", ve.Problems, len(tt.want), tt.want)
				return
			}
			for i, w := range tt.want {
				if !strings.Contains(ve.Problems[i], w) {
					t.Errorf("Validate() problem %d = %q, want it to contain %q", i, ve.Problems[i], w)
				}
			}
		})
	}
}

func TestBuildMixedKernels(t *testing.T) {
	other := "6.12.117+deb12-cloud-amd64 SMP preempt mod_unload modversions "
	mods := validManifest().Modules
	mods[1].Vermagic = other
	_, err := Build("nvidia", "535.261.03", "open", mods, nil)
	if err == nil {
		t.Fatalf("Build(modules of two kernels) = nil error, want one naming both vermagics")
	}
	for _, want := range []string{`"` + testVermagic + `" (nvidia.ko)`, `"` + other + `" (nvidia-drm.ko)`, "different kernels"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Build(modules of two kernels) error = %q, want it to contain %q", err, want)
		}
	}
}

func TestBuildDerivesFields(t *testing.T) {
	in := validManifest()
	mods := slices.Clone(in.Modules)
	slices.Reverse(mods)
	m, err := Build("nvidia", "535.261.03", "open", mods, map[string]string{"source": "sha256:1"})
	if err != nil {
		t.Fatalf("Build() error = %v", err)
	}
	if m.Kernel != testKernel {
		t.Errorf("Build().Kernel = %q, want %q", m.Kernel, testKernel)
	}
	if m.Vermagic != testVermagic {
		t.Errorf("Build().Vermagic = %q, want %q", m.Vermagic, testVermagic)
	}
	if !slices.Equal(m.External, []string{"drm_kms_helper"}) {
		t.Errorf("Build().External = %q, want [drm_kms_helper]", m.External)
	}
	if !slices.Equal(m.Firmware, in.Firmware) {
		t.Errorf("Build().Firmware = %q, want %q", m.Firmware, in.Firmware)
	}
	if m.Modules[0].Name != "nvidia" || m.Modules[1].Name != "nvidia_drm" {
		t.Errorf("Build() module order = %s, %s, want nvidia, nvidia_drm", m.Modules[0].Name, m.Modules[1].Name)
	}
	if !slices.Equal(m.Modules[1].Depends, []string{"drm_kms_helper", "nvidia"}) {
		t.Errorf("Build() nvidia_drm depends = %q, want sorted [drm_kms_helper nvidia]", m.Modules[1].Depends)
	}
}

func TestMarshalCanonical(t *testing.T) {
	a := validManifest()
	a.CacheKey = map[string]string{"source": "sha256:1", "compiler": "gcc-12", "headers": "6.1.0-56"}
	b := validManifest()
	slices.Reverse(b.Modules)
	b.Modules[0].Depends = []string{"nvidia", "drm_kms_helper", "nvidia"}
	b.CacheKey = map[string]string{"headers": "6.1.0-56", "compiler": "gcc-12", "source": "sha256:1"}

	ida, err := ID(a)
	if err != nil {
		t.Fatalf("ID(a) error = %v", err)
	}
	idb, err := ID(b)
	if err != nil {
		t.Fatalf("ID(b) error = %v", err)
	}
	if ida != idb {
		t.Errorf("ID(reordered manifest) = %s, want %s", idb, ida)
	}
	if b.Modules[0].Name != "nvidia_drm" {
		t.Errorf("Marshal changed its argument: first module = %s, want nvidia_drm", b.Modules[0].Name)
	}

	c := validManifest()
	c.Modules[0].Size = 101
	idc, _ := ID(c)
	if idc == ida {
		t.Errorf("ID(manifest with another size) = %s, same as the original", idc)
	}
	// The fs-verity digest is part of the id (so the cell's signature
	// covers it), and a manifest without one is written without the field,
	// as before it existed.
	v := validManifest()
	v.Modules[0].Verity = "sha256:" + strings.Repeat("ab", 32)
	if idv, _ := ID(v); idv == ida {
		t.Errorf("ID(manifest with a verity digest) = %s, same as without", idv)
	}
	if raw, _ := Marshal(validManifest()); strings.Contains(string(raw), "verity") {
		t.Errorf("Marshal(manifest without verity digests) writes the field:\n%s", raw)
	}

	raw, err := Marshal(a)
	if err != nil {
		t.Fatalf("Marshal() error = %v", err)
	}
	back, err := Unmarshal(raw)
	if err != nil {
		t.Fatalf("Unmarshal(Marshal(m)) error = %v", err)
	}
	again, _ := Marshal(back)
	if string(again) != string(raw) {
		t.Errorf("Marshal(Unmarshal(b)) = %s, want %s", again, raw)
	}
	if IDOf(raw) != ida {
		t.Errorf("IDOf(Marshal(m)) = %s, want ID(m) = %s", IDOf(raw), ida)
	}
}

func TestUnmarshalErrors(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{`{"format":1,"kernel":"k","bogus":1}`, `unknown field "bogus"`},
		{`{"format":2}`, "format 2, want 1"},
		{`{"format":1}{}`, "trailing data"},
		{`[`, "parse manifest"},
	}
	for _, tt := range tests {
		_, err := Unmarshal([]byte(tt.in))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Unmarshal(%q) error = %v, want it to contain %q", tt.in, err, tt.want)
		}
	}
}

func TestSoftdeps(t *testing.T) {
	tests := []struct {
		softdeps  []string
		pre, post []string
	}{
		{nil, nil, nil},
		{[]string{"pre: crc32c"}, []string{"crc32c"}, nil},
		{[]string{"pre: crypto-crc32c"}, []string{"crypto-crc32c"}, nil},
		{[]string{"pre: a b post: c"}, []string{"a", "b"}, []string{"c"}},
		{[]string{"post: c"}, nil, []string{"c"}},
		{[]string{"post: c pre: a post: d"}, []string{"a"}, []string{"c", "d"}},
		{[]string{"ignored pre: a"}, []string{"a"}, nil},
		{[]string{"pre: a", "pre: a b"}, []string{"a", "b"}, nil},
	}
	for _, tt := range tests {
		m := Module{Softdeps: tt.softdeps}
		if got := m.SoftPre(); !slices.Equal(got, tt.pre) {
			t.Errorf("SoftPre(%q) = %q, want %q", tt.softdeps, got, tt.pre)
		}
		if got := m.SoftPost(); !slices.Equal(got, tt.post) {
			t.Errorf("SoftPost(%q) = %q, want %q", tt.softdeps, got, tt.post)
		}
	}
}

func TestKeyID(t *testing.T) {
	a := KeyID(map[string]string{"a": "1", "b": "2"})
	b := KeyID(map[string]string{"b": "2", "a": "1"})
	if a != b || !IsDigest(a) {
		t.Errorf("KeyID(same key, other order) = %s and %s, want one equal digest", a, b)
	}
	if c := KeyID(map[string]string{"a": "1", "b": "3"}); c == a {
		t.Errorf("KeyID(other key) = %s, same as %s", c, a)
	}
	if e := KeyID(nil); e != "" {
		t.Errorf("KeyID(nil) = %q, want \"\"", e)
	}
}
