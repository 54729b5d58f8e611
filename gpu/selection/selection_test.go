package selection_test

import (
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/gpu/pci"
	"github.com/kpreload/kpreload/gpu/pci/pcitest"
	"github.com/kpreload/kpreload/gpu/selection"
	"github.com/kpreload/kpreload/gpu/supported"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/secureboot"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

const kver = "6.1.0-56-cloud-amd64"
const vermagic = kver + " SMP mod_unload modversions "

// set makes a cached driver set; list names a synthetic supported-gpus list ("" for none).
func set(driver, version, flavor, list string) selection.Set {
	s := &bootindex.Set{
		ID: fmt.Sprintf("%s-%s-%s", driver, version, flavor), Driver: driver, Version: version, Flavor: flavor, Dir: "sets",
		Modules: []bootindex.Module{{Name: strings.ReplaceAll(driver, "-", "_"), Vermagic: vermagic}},
	}
	if list != "" {
		s.SupportedGPUs = list
	}
	return selection.Set{Set: s, Dir: "/idx", From: "initramfs"}
}

func withVermagic(s selection.Set, v string) selection.Set {
	s.Set.Modules[0].Vermagic = v
	return s
}

// Synthetic lists (the real ones are tested below): chip ids are NVIDIA's.
var lists = map[string]string{
	// 535-like: A100 open-capable, V100 proprietary only, H100 for one board, K80 legacy 470.
	"l535.json": `{"chips":[
		{"devid":"0x20B0","name":"NVIDIA A100-SXM4-40GB","features":["kernelopen"]},
		{"devid":"0x1DB4","name":"Tesla V100-PCIE-16GB","features":[]},
		{"devid":"0x2330","subdevid":"0x16C1","subvendorid":"0x10DE","name":"NVIDIA H100 80GB HBM3","features":["kernelopen"]},
		{"devid":"0x102D","name":"Tesla K80","legacybranch":"470.xx","features":[]}]}`,
	// 470-like: no open modules, has K80, V100, A100.
	"l470.json": `{"chips":[
		{"devid":"0x20B0","name":"NVIDIA A100-SXM4-40GB","features":[]},
		{"devid":"0x1DB4","name":"Tesla V100-PCIE-16GB","features":[]},
		{"devid":"0x102D","name":"Tesla K80","features":[]}]}`,
	// old: V100 only.
	"lold.json": `{"chips":[{"devid":"0x1DB4","name":"Tesla V100-PCIE-16GB","features":[]}]}`,
}

func fakeRead(path string) (*supported.List, error) {
	doc, ok := lists[filepath.Base(path)]
	if !ok {
		return nil, fmt.Errorf("open %s: no such file or directory", path)
	}
	return supported.Parse([]byte(doc))
}

func gpu(addr string, dev, subdev uint16) pci.Device {
	return pci.Device{Address: addr, Vendor: 0x10de, Device: dev, SubVendor: 0x10de, SubDevice: subdev, Class: 0x030200}
}

var (
	a100  = gpu("0000:17:00.0", 0x20b0, 0x134f)
	v100  = gpu("0000:18:00.0", 0x1db4, 0x1212)
	k80   = gpu("0000:19:00.0", 0x102d, 0x106c)
	h100  = gpu("0000:1a:00.0", 0x2330, 0x16c1)
	h100b = gpu("0000:1b:00.0", 0x2330, 0x1234) // a board the list does not name
	edu   = pci.Device{Address: "0000:00:03.0", Vendor: 0x1234, Device: 0x11e8, SubVendor: 0x1af4, SubDevice: 0x1100, Class: 0x00ff00}
)

// compat returns r with resources.driver.cuda_compat: minor.
func compat(r instance.Request) instance.Request {
	r.Instance.Resources.Driver.CUDACompat = instance.CUDACompatMinor
	return r
}

func req(version, cuda, flavor string) instance.Request {
	return instance.Request{Source: instance.SourceFwCfg, Instance: instance.Instance{Resources: instance.Resources{
		Driver: instance.Driver{Version: version, CUDA: cuda, Flavor: flavor}}}}
}

// at sets where the request's version was written.
func at(r instance.Request, versionAt string) instance.Request {
	r.VersionAt = versionAt
	return r
}

// edu1 and edu2 are the test driver's two versions.
var (
	edu1 = set("kpreload-edu", "1.0.0", "open", "")
	edu2 = set("kpreload-edu", "2.0.0", "open", "")
)

func TestDecide(t *testing.T) {
	nv535 := set("nvidia", "535.261.03", "proprietary", "l535.json")
	nv535o := set("nvidia", "535.261.03", "open", "l535.json")
	nv535old := set("nvidia", "535.216.03", "proprietary", "l535.json")
	nv470 := set("nvidia", "470.256.02", "proprietary", "l470.json")
	nv450 := set("nvidia", "450.80.02", "proprietary", "lold.json")
	tests := []struct {
		name    string
		req     instance.Request
		sets    []selection.Set
		devs    []pci.Device
		driver  string
		chosen  string            // "version flavor", "" for a refusal
		exclude map[string]string // set ID -> rule
		refusal []string          // substrings of the refusal
		// fallback is the start of the driver's Fallback (the request's
		// version is not cached); "" when the request applied.
		fallback string
	}{
		{name: "latest picks the newest test driver", req: req("", "", ""), sets: []selection.Set{edu1, edu2}, devs: []pci.Device{edu},
			driver: "kpreload-edu", chosen: "2.0.0 open", exclude: map[string]string{edu1.Set.ID: selection.RuleNotChosen}},
		{name: "exact version", req: req("1.0.0", "", ""), sets: []selection.Set{edu1, edu2}, devs: []pci.Device{edu},
			driver: "kpreload-edu", chosen: "1.0.0 open", exclude: map[string]string{edu2.Set.ID: selection.RuleVersion}},
		{name: "branch of the test driver", req: req("2", "", ""), sets: []selection.Set{edu1, edu2},
			driver: "kpreload-edu", chosen: "2.0.0 open"},
		{name: "absent version goes on with the default", req: at(req("3.0.0", "", "open"), "/run/kpreload/seed/user-data:4"), sets: []selection.Set{edu1, edu2}, devs: []pci.Device{edu},
			driver: "kpreload-edu", chosen: "2.0.0 open", exclude: map[string]string{edu1.Set.ID: selection.RuleNotChosen},
			fallback: "asked version 3.0.0 (fw_cfg /run/kpreload/seed/user-data:4), which this image does not hold (it holds 2.0.0, 1.0.0): going on with the default, the latest qualifying version, flavour auto"},
		{name: "absent branch drops the request's CUDA minimum too", req: req("550", "12.4", ""), sets: []selection.Set{nv470, nv535}, devs: []pci.Device{v100},
			driver: "nvidia", chosen: "535.261.03 proprietary", exclude: map[string]string{nv470.Set.ID: selection.RuleNotChosen},
			fallback: "asked branch 550 (fw_cfg), which this image does not hold (it holds 535.261.03, 470.256.02)"},
		{name: "cached version that cannot load is refused, not replaced", req: req("535", "", "open"), sets: []selection.Set{nv535o, nv535}, devs: []pci.Device{v100},
			driver: "nvidia", exclude: map[string]string{nv535o.Set.ID: selection.RuleHardware, nv535.Set.ID: selection.RuleFlavor},
			refusal: []string{"no nvidia driver will be loaded: asked branch 535", "would work on this machine: 535.261.03 proprietary"}},
		{name: "explicit flavour the test driver lacks", req: req("", "", "proprietary"), sets: []selection.Set{edu1, edu2},
			driver: "kpreload-edu", exclude: map[string]string{edu1.Set.ID: selection.RuleFlavor}, refusal: []string{"asked flavour proprietary, set is open"}},
		{name: "vermagic of another kernel", req: req("", "", ""), sets: []selection.Set{edu1, withVermagic(set("kpreload-edu", "2.0.0", "open", ""), "6.12.117+deb12-cloud-amd64 SMP")},
			driver: "kpreload-edu", chosen: "1.0.0 open", exclude: map[string]string{edu2.Set.ID: selection.RuleVermagic}},
		{name: "branch 535 picks the newest 535", req: req("535", "", ""), sets: []selection.Set{nv470, nv535old, nv535}, devs: []pci.Device{v100},
			driver: "nvidia", chosen: "535.261.03 proprietary", exclude: map[string]string{nv470.Set.ID: selection.RuleVersion, nv535old.Set.ID: selection.RuleNotChosen}},
		{name: "exact old version", req: req("535.216.03", "", ""), sets: []selection.Set{nv535old, nv535}, devs: []pci.Device{v100},
			driver: "nvidia", chosen: "535.216.03 proprietary"},
		{name: "CUDA 12.2 excludes 470", req: req("470", "12.2", ""), sets: []selection.Set{nv470, nv535}, devs: []pci.Device{v100},
			driver: "nvidia", exclude: map[string]string{nv470.Set.ID: selection.RuleCUDA, nv535.Set.ID: selection.RuleVersion},
			refusal: []string{"with CUDA 12.2 (driver >= 535.54.03: CUDA 12.2 toolkit minimum)", "470.256.02 proprietary (cuda: CUDA 12.2 needs driver >= 535.54.03 (CUDA 12.2 toolkit minimum; resources.driver.cuda_compat: minor would accept >= 525.60.13))", "would work on this machine: 535.261.03 proprietary, 470.256.02 proprietary"}},
		{name: "CUDA 12.4 needs its toolkit's 550.54.14", req: req("latest", "12.4", ""), sets: []selection.Set{nv535}, devs: []pci.Device{v100},
			driver: "nvidia", exclude: map[string]string{nv535.Set.ID: selection.RuleCUDA},
			refusal: []string{"with CUDA 12.4 (driver >= 550.54.14: CUDA 12.4 toolkit minimum)", "resources.driver.cuda_compat: minor would accept >= 525.60.13"}},
		{name: "CUDA 12.4 with cuda_compat minor accepts 535", req: compat(req("latest", "12.4", "")), sets: []selection.Set{nv535}, devs: []pci.Device{v100},
			driver: "nvidia", chosen: "535.261.03 proprietary"},
		{name: "CUDA 11.0 accepts exactly 450.80.02", req: req("450", "11.0", ""), sets: []selection.Set{nv450}, devs: []pci.Device{v100},
			driver: "nvidia", chosen: "450.80.02 proprietary"},
		{name: "CUDA 13 needs 580", req: req("latest", "13.0", ""), sets: []selection.Set{nv535, nv470}, devs: []pci.Device{v100},
			driver: "nvidia", refusal: []string{"CUDA 13.0 needs driver >= 580.65.06 (CUDA 13.0 toolkit minimum)"}},
		{name: "GPU missing from the newest list", req: req("", "", ""), sets: []selection.Set{nv450, nv470}, devs: []pci.Device{k80},
			driver: "nvidia", chosen: "470.256.02 proprietary", exclude: map[string]string{nv450.Set.ID: selection.RuleHardware}},
		{name: "legacybranch forces 470 for a K80", req: req("", "", ""), sets: []selection.Set{nv470, nv535}, devs: []pci.Device{k80},
			driver: "nvidia", chosen: "470.256.02 proprietary", exclude: map[string]string{nv535.Set.ID: selection.RuleHardware}},
		{name: "legacybranch refusal names the branch", req: req("535", "", ""), sets: []selection.Set{nv470, nv535}, devs: []pci.Device{k80},
			driver: "nvidia", refusal: []string{"is supported only by the 470.xx legacy branch", "would work on this machine: 470.256.02 proprietary (e.g. kpreload.driver=470.256.02)"}},
		{name: "subsystem ids: listed board", req: req("", "", "proprietary"), sets: []selection.Set{nv535}, devs: []pci.Device{h100},
			driver: "nvidia", chosen: "535.261.03 proprietary"},
		{name: "subsystem ids: other board refused", req: req("", "", ""), sets: []selection.Set{nv535, nv535o}, devs: []pci.Device{h100b},
			driver: "nvidia", refusal: []string{"GPU 0000:1b:00.0 10de:2330 (subsystem 10de:1234) is not in 535.261.03's supported-gpus.json (it lists device 2330 only for other boards: NVIDIA H100 80GB HBM3)", "nothing cached would work: no cached version's supported-gpus.json supports GPU 0000:1b:00.0 10de:2330"}},
		{name: "auto picks open when every GPU has kernelopen", req: req("", "", "auto"), sets: []selection.Set{nv535, nv535o}, devs: []pci.Device{a100, h100},
			driver: "nvidia", chosen: "535.261.03 open", exclude: map[string]string{nv535.Set.ID: selection.RuleFlavor}},
		{name: "auto picks proprietary for mixed GPUs", req: req("", "", ""), sets: []selection.Set{nv535o, nv535}, devs: []pci.Device{a100, v100},
			driver: "nvidia", chosen: "535.261.03 proprietary", exclude: map[string]string{nv535o.Set.ID: selection.RuleHardware}},
		{name: "auto falls back to proprietary when open is not cached", req: req("", "", ""), sets: []selection.Set{nv535}, devs: []pci.Device{a100},
			driver: "nvidia", chosen: "535.261.03 proprietary"},
		{name: "explicit proprietary on open-capable GPUs", req: req("", "", "proprietary"), sets: []selection.Set{nv535o, nv535}, devs: []pci.Device{a100},
			driver: "nvidia", chosen: "535.261.03 proprietary", exclude: map[string]string{nv535o.Set.ID: selection.RuleFlavor}},
		{name: "explicit open refused for a V100", req: req("", "", "open"), sets: []selection.Set{nv535o, nv535}, devs: []pci.Device{v100},
			driver: "nvidia", refusal: []string{"is not supported by the open kernel modules", "would work on this machine: 535.261.03 proprietary"}},
		{name: "mixed GPUs must all be supported", req: req("", "", ""), sets: []selection.Set{nv535, nv450}, devs: []pci.Device{v100, k80},
			driver: "nvidia", refusal: []string{"Tesla K80) is supported only by the 470.xx legacy branch", "GPU 0000:19:00.0 10de:102d (subsystem 10de:106c) is not in 450.80.02's"}},
		{name: "no NVIDIA GPU: hardware rules vacuous", req: req("", "", ""), sets: []selection.Set{nv470, nv535o}, devs: []pci.Device{edu},
			driver: "nvidia", chosen: "535.261.03 open"},
		{name: "unreadable supported-gpus.json", req: req("", "", ""), sets: []selection.Set{set("nvidia", "550.1.1", "proprietary", "missing.json"), nv535}, devs: []pci.Device{v100},
			driver: "nvidia", chosen: "535.261.03 proprietary", exclude: map[string]string{"nvidia-550.1.1-proprietary": selection.RuleList}},
		// With a GPU driver cached the request is for it; the test driver takes its latest.
		{name: "request targets the GPU driver", req: req("1.0.0", "", ""), sets: []selection.Set{edu1, edu2, nv535}, devs: []pci.Device{edu, v100},
			driver: "kpreload-edu", chosen: "2.0.0 open"},
		{name: "test driver ignores NVIDIA hardware rules", req: req("", "", ""), sets: []selection.Set{edu1}, devs: []pci.Device{v100},
			driver: "kpreload-edu", chosen: "1.0.0 open"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := selection.Decide(selection.Input{Kernel: kver, Request: tt.req, Sets: tt.sets, Devices: tt.devs, ReadList: fakeRead})
			dd := d.Driver(tt.driver)
			if dd == nil {
				t.Fatalf("no decision for %s: %+v", tt.driver, d.Drivers)
			}
			got := ""
			if dd.Chosen != nil {
				got = dd.Chosen.Version + " " + dd.Chosen.Flavor
			}
			if got != tt.chosen {
				t.Errorf("chosen %q, want %q; candidates %+v; refusal %s", got, tt.chosen, dd.Candidates, dd.Refusal)
			}
			if (dd.Refusal == "") != (tt.chosen != "") {
				t.Errorf("refusal %q with chosen %q", dd.Refusal, got)
			}
			for id, rule := range tt.exclude {
				found := false
				for _, c := range dd.Candidates {
					if c.ID == id {
						found = true
						if c.Excluded != rule {
							t.Errorf("set %s excluded by %q (%s), want %q", id, c.Excluded, c.Reason, rule)
						}
					}
				}
				if !found {
					t.Errorf("set %s not among the candidates %+v", id, dd.Candidates)
				}
			}
			if !strings.HasPrefix(dd.Fallback, tt.fallback) || (dd.Fallback == "") != (tt.fallback == "") {
				t.Errorf("fallback %q, want it to start with %q", dd.Fallback, tt.fallback)
			}
			if tt.fallback != "" && !slices.Contains(d.Warnings, tt.driver+": "+dd.Fallback) {
				t.Errorf("warnings %q lack the fallback", d.Warnings)
			}
			for _, r := range tt.refusal {
				if !strings.Contains(dd.Refusal, r) {
					t.Errorf("refusal:\n%s\nwant it to contain %q", dd.Refusal, r)
				}
			}
			// Only the chosen set of each driver may load; kernel sets always may.
			for _, s := range tt.sets {
				want := dd.Chosen != nil && s.Set.ID == dd.Chosen.ID
				if s.Set.Driver != tt.driver {
					continue
				}
				if got := d.Keep(s.Set); got != want {
					t.Errorf("Keep(%s) = %v, want %v", s.Set.ID, got, want)
				}
			}
			if !d.Keep(&bootindex.Set{ID: "kernel"}) {
				t.Errorf("Keep(kernel set) = false")
			}
		})
	}
}

func TestDecideGPUWarnings(t *testing.T) {
	nv535 := set("nvidia", "535.261.03", "proprietary", "l535.json")
	tests := []struct {
		typ   string
		count int
		devs  []pci.Device
		want  []string
	}{
		{"v100", 1, []pci.Device{v100}, nil},
		{"V100", 2, []pci.Device{v100, v100}, nil},
		{"v100", 4, []pci.Device{v100}, []string{"resources.gpu.count asks for 4 GPUs, 1 NVIDIA GPU(s) present"}},
		{"a100", 0, []pci.Device{v100}, []string{"resources.gpu.type asks for a100, GPU 0000:18:00.0 is Tesla V100-PCIE-16GB"}},
		{"h200", 0, []pci.Device{gpu("0000:00:06.0", 0x2335, 0x18bf)}, []string{"resources.gpu.type h200 not checked for GPU 0000:00:06.0 10de:2335: no cached supported-gpus.json names it"}},
		{"v100", 1, nil, []string{"resources.gpu.count asks for 1 GPUs, 0 NVIDIA GPU(s) present", "resources.gpu.type asks for v100, no NVIDIA GPU present"}},
	}
	for _, tt := range tests {
		r := req("", "", "")
		r.Instance.Resources.GPU = instance.GPU{Type: tt.typ, Count: tt.count}
		d := selection.Decide(selection.Input{Kernel: kver, Request: r, Sets: []selection.Set{nv535}, Devices: tt.devs, ReadList: fakeRead})
		if strings.Join(d.Warnings, "|") != strings.Join(tt.want, "|") {
			t.Errorf("type %s count %d, %d GPUs: warnings %q, want %q", tt.typ, tt.count, len(tt.devs), d.Warnings, tt.want)
		}
	}
}

func TestDecideFullVermagic(t *testing.T) {
	s := withVermagic(set("kpreload-edu", "1.0.0", "open", ""), kver+" SMP preempt mod_unload ")
	d := selection.Decide(selection.Input{Kernel: kver, Vermagic: vermagic, Request: req("", "", ""), Sets: []selection.Set{s}})
	dd := d.Driver("kpreload-edu")
	if dd.Chosen != nil || dd.Candidates[0].Excluded != selection.RuleVermagic {
		t.Errorf("set with another vermagic: %+v, want excluded by vermagic", dd)
	}
}

// RealLists returns the supported-gpus.json files of the Debian packages the
// recipes name, fetching them with scripts/supported-gpus.sh when missing.
func realLists(t *testing.T) (l535, l470 string) {
	t.Helper()
	l := realList(t, "nvidia-driver_535.261.03-1", "nvidia-tesla-470-driver_470.256.02-1~deb12u1")
	return l[0], l[1]
}

// realList returns the paths of the real supported-gpus.json of packages
// (name_version), fetching them with scripts/supported-gpus.sh when missing
// (testenv.SupportedGPUs: skipped under -short).
func realList(t *testing.T, pkgs ...string) []string {
	t.Helper()
	var out []string
	for _, p := range pkgs {
		out = append(out, testenv.SupportedGPUs(t, p))
	}
	return out
}

// TestDecideH200With550 is the same H200 VM against a cache holding 535 and
// 550 in both flavours (the real lists of nvidia-driver 535.261.03-1 and
// 550.163.01-2): only 550 lists the H200, with kernelopen, so the default
// request (latest, auto) loads 550.163.01 open; asking for 535 is refused
// naming what would work; CUDA 12.4 accepts 550.163.01.
func TestDecideH200With550(t *testing.T) {
	l := realList(t, "nvidia-driver_535.261.03-1", "nvidia-driver_550.163.01-2")
	devs, err := pci.Scan(pcitest.FromFixture(t, filepath.Join(pcitest.H200(t), "pci-sysfs.txt")))
	if err != nil {
		t.Fatal(err)
	}
	real := func(version, flavor, list string) selection.Set {
		s := set("nvidia", version, flavor, "")
		s.Set.Dir, s.Set.SupportedGPUs, s.Dir = filepath.Dir(list), filepath.Base(list), "/"
		return s
	}
	sets := []selection.Set{real("535.261.03", "proprietary", l[0]), real("535.261.03", "open", l[0]), real("550.163.01", "proprietary", l[1]), real("550.163.01", "open", l[1])}
	for _, tt := range []struct {
		name   string
		req    instance.Request
		chosen string
		refuse string
	}{
		{"latest auto", req("", "", ""), "550.163.01 open", ""},
		{"branch 550, CUDA 12.4", req("550", "12.4", ""), "550.163.01 open", ""},
		{"proprietary asked", req("550", "", "proprietary"), "550.163.01 proprietary", ""},
		{"branch 535", req("535", "", ""), "", "would work on this machine: 550.163.01 proprietary, 550.163.01 open (e.g. kpreload.driver=550.163.01)"},
	} {
		d := selection.Decide(selection.Input{Kernel: kver, Request: tt.req, Sets: sets, Devices: devs})
		dd := d.Driver("nvidia")
		got := ""
		if dd.Chosen != nil {
			got = dd.Chosen.Version + " " + dd.Chosen.Flavor
		}
		if got != tt.chosen || !strings.Contains(dd.Refusal, tt.refuse) {
			t.Errorf("%s: chosen %q refusal %q, want %q %q", tt.name, got, dd.Refusal, tt.chosen, tt.refuse)
		}
		if len(d.GPUs) != 1 || d.GPUs[0].Name != "NVIDIA H200" {
			t.Errorf("%s: GPUs %+v, want the H200 named by 550's list", tt.name, d.GPUs)
		}
	}
}

// TestDecideH200Fixture runs the decision on the sysfs of a real H200 VM against
// the real 535.261.03 and 470.256.02 lists: the H200 (10de:2335) is in neither,
// so nothing may load, and the refusal says so.
func TestDecideH200Fixture(t *testing.T) {
	l535, l470 := realLists(t)
	devs, err := pci.Scan(pcitest.FromFixture(t, filepath.Join(pcitest.H200(t), "pci-sysfs.txt")))
	if err != nil {
		t.Fatal(err)
	}
	real := func(version, flavor, list string) selection.Set {
		s := set("nvidia", version, flavor, "")
		s.Set.Dir, s.Set.SupportedGPUs, s.Dir = filepath.Dir(list), filepath.Base(list), "/"
		return s
	}
	sets := []selection.Set{real("535.261.03", "proprietary", l535), real("535.261.03", "open", l535), real("470.256.02", "proprietary", l470)}
	r := req("", "", "")
	r.Instance.Resources.GPU = instance.GPU{Type: "h200", Count: 1}
	d := selection.Decide(selection.Input{Kernel: kver, Request: r, Sets: sets, Devices: devs})
	dd := d.Driver("nvidia")
	if dd == nil || dd.Chosen != nil {
		t.Fatalf("nvidia decision %+v, want a refusal", dd)
	}
	for _, c := range dd.Candidates {
		if c.Excluded != selection.RuleHardware || !strings.Contains(c.Reason, "GPU 0000:00:06.0 10de:2335 (subsystem 10de:18bf) is not in "+c.Version+"'s supported-gpus.json") {
			t.Errorf("candidate %s %s: %s (%s), want excluded by hardware naming the H200", c.Version, c.Flavor, c.Excluded, c.Reason)
		}
	}
	if want := "nothing cached would work: no cached version's supported-gpus.json supports GPU 0000:00:06.0 10de:2335 (subsystem 10de:18bf)"; !strings.Contains(dd.Refusal, want) {
		t.Errorf("refusal %q, want %q", dd.Refusal, want)
	}
	if len(d.GPUs) != 1 || d.GPUs[0].ID != "10de:2335" || d.GPUs[0].Name != "" {
		t.Errorf("GPUs %+v, want the H200 without a name", d.GPUs)
	}
	if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], "h200 not checked") {
		t.Errorf("warnings %q", d.Warnings)
	}

	// The same machine with an H100 SXM (10de:2330, board 10de:16c1) instead:
	// 535 lists it with kernelopen, 470 does not list it, auto picks open.
	h := devs
	for i := range h {
		if h[i].IsNVIDIAGPU() {
			h[i].Device, h[i].SubDevice = 0x2330, 0x16c1
		}
	}
	d = selection.Decide(selection.Input{Kernel: kver, Request: req("", "", ""), Sets: sets, Devices: h})
	dd = d.Driver("nvidia")
	if dd.Chosen == nil || dd.Chosen.Version != "535.261.03" || dd.Chosen.Flavor != "open" {
		t.Errorf("H100: chosen %+v, want 535.261.03 open; candidates %+v", dd.Chosen, dd.Candidates)
	}
	if d.GPUs[0].Name != "NVIDIA H100 80GB HBM3" {
		t.Errorf("H100 name %q", d.GPUs[0].Name)
	}
}

// TestDecideMIGAndSharing runs gpu.mig and gpu.sharing requests on the real
// H200 VM's sysfs: an H200 profile gives its layout, an H100 profile is
// refused naming what the H200 offers, and neither changes the driver choice.
func TestDecideMIGAndSharing(t *testing.T) {
	l := realList(t, "nvidia-driver_550.163.01-2")
	devs, err := pci.Scan(pcitest.FromFixture(t, filepath.Join(pcitest.H200(t), "pci-sysfs.txt")))
	if err != nil {
		t.Fatal(err)
	}
	s := set("nvidia", "550.163.01", "open", "")
	s.Set.Dir, s.Set.SupportedGPUs, s.Dir = filepath.Dir(l[0]), filepath.Base(l[0]), "/"
	for _, tt := range []struct {
		mig, wantLine string
		devices       map[string]int
	}{
		{"all-1g.18gb", "kpreload: MIG all-1g.18gb for the MIG manager: 0000:00:06.0 7 × 1g.18gb", map[string]int{"1g.18gb": 7}},
		{"all-balanced", "kpreload: MIG all-balanced for the MIG manager: 0000:00:06.0 2 × 1g.18gb + 1 × 2g.35gb + 1 × 3g.71gb", map[string]int{"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}},
		{"all-1g.10gb", "kpreload: MIG: gpu.mig all-1g.10gb refused: GPU 0000:00:06.0 (10de:2335, H200 141GB) has no MIG profile 1g.10gb; it offers 1g.18gb", nil},
	} {
		r := req("", "", "")
		r.Instance.Resources.GPU.MIG = tt.mig
		r.Instance.Resources.GPU.Sharing = &instance.Sharing{Strategy: "time-slicing", Replicas: 4}
		d := selection.Decide(selection.Input{Kernel: kver, Request: r, Sets: []selection.Set{s}, Devices: devs})
		if dd := d.Driver("nvidia"); dd.Chosen == nil || dd.Chosen.Version != "550.163.01" {
			t.Errorf("%s: the driver choice changed: %+v", tt.mig, dd)
		}
		lines := strings.Join(d.Lines(), "\n")
		if !strings.Contains(lines, tt.wantLine) || !strings.Contains(lines, "GPU sharing for Kubernetes: time-slicing, 4 replicas per GPU") {
			t.Errorf("%s: lines\n%s\nwant %q and the sharing line", tt.mig, lines, tt.wantLine)
		}
		if d.MIG == nil || (tt.devices == nil) != (d.MIG.Refusal != "") {
			t.Fatalf("%s: MIG decision %+v", tt.mig, d.MIG)
		}
		if tt.devices != nil && (len(d.MIG.GPUs) != 1 || !reflect.DeepEqual(d.MIG.GPUs[0].Devices, tt.devices)) {
			t.Errorf("%s: MIG GPUs %+v, want %v", tt.mig, d.MIG.GPUs, tt.devices)
		}
		if d.Request.Sharing != "time-slicing" || d.Request.SharingReplicas != 4 || d.Request.MIG != tt.mig {
			t.Errorf("%s: request %+v", tt.mig, d.Request)
		}
	}
}

// TestDecideSignatures: where the kernel enforces module signatures (Secure
// Boot), an unsigned set, or one signed by a key no keyring holds, is
// excluded before any request rule, so an older signed version is chosen;
// with nothing enforced every set qualifies.
func TestDecideSignatures(t *testing.T) {
	signed := func(s selection.Set, signer string) selection.Set {
		c := *s.Set
		c.Modules = []bootindex.Module{c.Modules[0]}
		c.Modules[0].Signer, c.Modules[0].SigKey = signer, "1A:2B"
		s.Set = &c
		return s
	}
	unsigned := func(s selection.Set) selection.Set {
		c := *s.Set
		c.Modules = []bootindex.Module{c.Modules[0]}
		c.Modules[0].Unsigned = true
		s.Set = &c
		return s
	}
	sb := &secureboot.State{SecureBoot: secureboot.Enabled, Lockdown: "integrity", Enforced: true,
		Keys: []secureboot.Key{{Subject: "Debian Secure Boot CA", ID: "6ccece7e"}, {Subject: "image key", ID: "99"}}}
	off := &secureboot.State{SecureBoot: secureboot.Disabled, Lockdown: "none"}
	e1, e2u, e1x := signed(edu1, "image key"), unsigned(edu2), signed(edu1, "a stranger")
	tests := []struct {
		name    string
		sig     *secureboot.State
		sets    []selection.Set
		chosen  string
		exclude map[string]string
		refusal string
	}{
		{"secure boot: the unsigned newer set is refused", sb, []selection.Set{e1, e2u}, "1.0.0",
			map[string]string{e2u.Set.ID: selection.RuleSignature}, ""},
		{"secure boot: a key not enrolled", sb, []selection.Set{e1x, e2u}, "",
			map[string]string{e1x.Set.ID: selection.RuleSignature, e2u.Set.ID: selection.RuleSignature},
			`signed by "a stranger" (sig_key 1A:2B), which no kernel keyring holds, and Secure Boot is on (lockdown integrity): enroll that certificate as a Machine Owner Key with ` + "`mokutil --import /usr/share/kpreload/module-keys/1a2b.der`"},
		{"no secure boot", off, []selection.Set{e1x, e2u}, "2.0.0", map[string]string{e1x.Set.ID: selection.RuleNotChosen}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := selection.Decide(selection.Input{Kernel: kver, Request: req("", "", ""), Sets: tt.sets, Devices: []pci.Device{edu}, Signatures: tt.sig})
			dd := d.Driver("kpreload-edu")
			got := ""
			if dd.Chosen != nil {
				got = dd.Chosen.Version
			}
			if got != tt.chosen {
				t.Errorf("chosen %q, want %q (refusal %q)", got, tt.chosen, dd.Refusal)
			}
			for _, c := range dd.Candidates {
				if want := tt.exclude[c.ID]; c.Excluded != want {
					t.Errorf("set %s excluded by %q (%s), want %q", c.ID, c.Excluded, c.Reason, want)
				}
			}
			if !strings.Contains(dd.Refusal, tt.refusal) {
				t.Errorf("refusal %q, want it to contain %q", dd.Refusal, tt.refusal)
			}
		})
	}
}
