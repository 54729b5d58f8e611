// Package selection decides which cached driver sets may load on this machine:
// for each driver (nvidia, kpreload-edu, ...) one version and flavour, chosen
// from the instance request (version, minimum CUDA, flavour), the running
// kernel's vermagic, the PCI devices present and the driver's
// supported-gpus.json. /init and `kpreload plan` take the same decision with
// it; it loads nothing.
package selection

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/gpu/mig"
	"github.com/kpreload/kpreload/gpu/pci"
	"github.com/kpreload/kpreload/gpu/supported"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/modinfo"
	"github.com/kpreload/kpreload/kmodcache/secureboot"
	"github.com/kpreload/kpreload/report"
)

// Rules that exclude a candidate set, as recorded in report.SelectionCandidate.Excluded.
const (
	RuleVermagic  = "vermagic"
	RuleSignature = "signature"
	RuleVersion   = "version"
	RuleCUDA      = "cuda"
	RuleList      = "supported-gpus"
	RuleHardware  = "hardware"
	RuleFlavor    = "flavor"
	RuleNotChosen = "not-chosen"
)

// Set is a cached driver set and where its index lives.
type Set struct {
	Set *bootindex.Set
	// Dir is the directory of the index file the set came from (Set.Dir and
	// Set.SupportedGPUs resolve against it).
	Dir string
	// From labels the index: "initramfs", "rootfs", or a cache directory.
	From string
}

// Input is everything a decision depends on.
type Input struct {
	// Kernel is the running kernel's release.
	Kernel string
	// Vermagic is the running kernel's full vermagic when known (from its own
	// modules); otherwise only its first word is compared with Kernel.
	Vermagic string
	Request  instance.Request
	// Sets are the sets of every boot index; the kernel's own are ignored.
	Sets []Set
	// Devices are the PCI devices present.
	Devices []pci.Device
	// Signatures is what the running kernel enforces about module
	// signatures; nil means nothing is checked (the loader and the kernel
	// still are).
	Signatures *secureboot.State
	// ReadList reads a supported-gpus.json; nil means supported.ReadFile.
	ReadList func(path string) (*supported.List, error)
}

// Decision is the outcome: the report section plus which sets may load.
type Decision struct {
	report.Selection
	keep   map[string]bool
	chosen []Set
}

// KernelVermagic returns the running kernel's full vermagic as its own
// modules in idx (the kernel's set) carry it, or "" when idx has none: the
// Input.Vermagic /init, plan and switch compare driver sets with.
func KernelVermagic(idx *bootindex.Index) string {
	for i := range idx.Sets {
		if s := &idx.Sets[i]; s.ID == bootindex.KernelSetID && len(s.Modules) > 0 {
			return s.Modules[0].Vermagic
		}
	}
	return ""
}

// IsKernelSet reports whether a set is the kernel's own modules, which
// selection never restricts.
func IsKernelSet(s *bootindex.Set) bool { return s.ID == bootindex.KernelSetID || s.Driver == "" }

// Keep reports whether a set may be loaded: the kernel's own sets always, a
// driver set only when it is the chosen one of its driver. It fits
// coldplug.Index.Add's keep argument.
func (d *Decision) Keep(s *bootindex.Set) bool { return IsKernelSet(s) || d.keep[s.ID] }

// Chosen returns the chosen sets, one per driver that has one, by driver name.
func (d *Decision) Chosen() []Set { return d.chosen }

// Driver returns the decision for a driver, or nil.
func (d *Decision) Driver(name string) *report.SelectionDriver {
	for i := range d.Drivers {
		if d.Drivers[i].Driver == name {
			return &d.Drivers[i]
		}
	}
	return nil
}

// IsNVIDIA reports whether a driver name is one of NVIDIA's, to which CUDA
// minimums apply.
func IsNVIDIA(driver string) bool { return strings.HasPrefix(driver, "nvidia") }

// cand is a set under evaluation.
type cand struct {
	Set
	rep  report.SelectionCandidate
	list *supported.List
	// hwOK: passes vermagic and hardware (the rules no request can change).
	hwOK bool
	// prefers is the flavour auto picks for this set's version ("" when no preference).
	prefers string
}

// Decide takes the decision. It never fails: problems become exclusions,
// refusals and warnings in the result.
func Decide(in Input) *Decision {
	if in.ReadList == nil {
		in.ReadList = supported.ReadFile
	}
	drv := in.Request.Instance.Resources.Driver
	gpuReq := in.Request.Instance.Resources.GPU
	d := &Decision{keep: map[string]bool{}}
	d.Source, d.Origin, d.Kernel = in.Request.Source, in.Request.Origin, in.Kernel
	d.Notes = slices.Clone(in.Request.Notes)
	d.Request = report.SelectionRequest{Version: drv.WantVersion(), CUDA: drv.CUDA, CUDACompat: drv.CUDACompat, Flavor: drv.WantFlavor(), GPUType: gpuReq.Type, GPUCount: gpuReq.Count, MIG: gpuReq.MIG}
	if sh := gpuReq.Sharing; sh != nil {
		d.Request.Sharing, d.Request.SharingReplicas = sh.Strategy, sh.Replicas
	}
	d.Drivers = []report.SelectionDriver{}

	var gpus []pci.Device
	for _, dev := range in.Devices {
		if dev.IsNVIDIAGPU() {
			gpus = append(gpus, dev)
		}
	}

	// Group the driver sets by driver, in name order, keeping index order inside.
	groups := map[string][]*cand{}
	lists := map[string]*supported.List{}
	listErr := map[string]error{}
	for _, s := range in.Sets {
		if IsKernelSet(s.Set) {
			continue
		}
		c := &cand{Set: s, rep: report.SelectionCandidate{ID: s.Set.ID, Version: s.Set.Version, Flavor: s.Set.Flavor, From: s.From}}
		if s.Set.SupportedGPUs != "" {
			p := filepath.Join(s.Dir, s.Set.Dir, s.Set.SupportedGPUs)
			if _, done := lists[p]; !done && listErr[p] == nil {
				l, err := in.ReadList(p)
				lists[p], listErr[p] = l, err
			}
			c.list = lists[p]
			if listErr[p] != nil {
				c.exclude(RuleList, fmt.Sprintf("cannot read its supported-gpus.json: %v", listErr[p]))
			}
		}
		groups[s.Set.Driver] = append(groups[s.Set.Driver], c)
	}
	names := make([]string, 0, len(groups))
	targeted := map[string]bool{}
	for n, cs := range groups {
		names = append(names, n)
		if IsNVIDIA(n) || slices.ContainsFunc(cs, func(c *cand) bool { return c.Set.Set.SupportedGPUs != "" }) {
			targeted[n] = true
		}
	}
	sort.Strings(names)
	// With no GPU driver cached, the request applies to every driver (an image
	// with only a test or accelerator driver).
	if len(targeted) == 0 {
		for _, n := range names {
			targeted[n] = true
		}
	}

	for _, name := range names {
		dd := d.decideDriver(in, name, groups[name], targeted[name], gpus)
		d.Drivers = append(d.Drivers, dd)
	}

	// GPU names and the gpu: type/count checks.
	for _, g := range gpus {
		sg := report.SelectionGPU{Address: g.Address, ID: g.ID(), Subsystem: g.SubsystemID(), Class: fmt.Sprintf("0x%06x", g.Class)}
		sg.Name = gpuName(g, lists)
		d.GPUs = append(d.GPUs, sg)
	}
	d.checkGPUs(gpuReq, d.GPUs, len(lists) > 0)
	if gpuReq.MIG != "" {
		d.MIG = decideMIG(gpuReq.MIG, d.GPUs)
	}
	return d
}

// decideMIG checks a gpu.mig request against the GPUs present (gpu/mig's
// table): a layout per GPU, or the refusal.
func decideMIG(request string, gpus []report.SelectionGPU) *report.SelectionMIG {
	out := &report.SelectionMIG{Request: request}
	var in []mig.GPU
	for _, g := range gpus {
		in = append(in, mig.GPU{Address: g.Address, ID: g.ID})
	}
	layouts, err := mig.Plan(request, in)
	if err != nil {
		out.Refusal = err.Error()
		return out
	}
	for _, l := range layouts {
		out.GPUs = append(out.GPUs, report.SelectionMIGGPU{Address: l.Address, ID: l.ID, Model: l.Model, Enabled: l.Enabled, Devices: l.Devices})
	}
	return out
}

func (c *cand) exclude(rule, reason string) {
	if c.rep.Excluded == "" {
		c.rep.Excluded, c.rep.Reason = rule, reason
	}
}

// decideDriver applies every rule to one driver's sets.
func (d *Decision) decideDriver(in Input, name string, cs []*cand, requested bool, gpus []pci.Device) report.SelectionDriver {
	drv := in.Request.Instance.Resources.Driver
	want, flavor := drv.WantVersion(), drv.WantFlavor()
	fallback := ""
	if requested {
		fallback = absentVersion(in.Request, want, cs)
	}
	if !requested || fallback != "" {
		want, flavor = instance.Latest, instance.FlavorAuto
	}
	dd := report.SelectionDriver{Driver: name, Requested: requested, Rule: versionRule(want), Fallback: fallback, Candidates: []report.SelectionCandidate{}}
	if fallback != "" {
		d.Warnings = append(d.Warnings, name+": "+fallback)
	}
	var cuda instance.CUDARequirement
	if requested && fallback == "" && drv.CUDA != "" && IsNVIDIA(name) {
		cuda, _ = instance.CUDAMinimum(drv.CUDA, drv.CUDACompat)
	}
	minDriver := cuda.Driver
	unchecked := false
	for _, c := range cs {
		// Rules no request can change: vermagic, signatures, then hardware.
		if why := vermagicMismatch(c.Set.Set, in.Kernel, in.Vermagic); why != "" {
			c.exclude(RuleVermagic, why)
		}
		if why := in.Signatures.Refusal(signatureModules(c.Set.Set)); why != "" {
			c.exclude(RuleSignature, why)
		}
		if c.list != nil {
			for _, g := range gpus {
				chip, ok := c.list.Lookup(g)
				switch {
				case !ok:
					c.exclude(RuleHardware, fmt.Sprintf("GPU %s is not in %s's supported-gpus.json%s", g, c.rep.Version, otherBoards(c.list, g)))
				case chip.LegacyBranch != "" && chip.Branch() != majorOf(c.rep.Version):
					c.exclude(RuleHardware, fmt.Sprintf("GPU %s (%s) is supported only by the %s legacy branch", g, chip.Name, chip.LegacyBranch))
				case c.rep.Flavor == instance.FlavorOpen && !chip.KernelOpen():
					c.exclude(RuleHardware, fmt.Sprintf("GPU %s (%s) is not supported by the open kernel modules (no kernelopen in %s's supported-gpus.json)", g, chip.Name, c.rep.Version))
				}
			}
			c.prefers = instance.FlavorOpen
			for _, g := range gpus {
				if chip, ok := c.list.Lookup(g); !ok || !chip.KernelOpen() {
					c.prefers = instance.FlavorProprietary
				}
			}
		} else if len(gpus) > 0 && IsNVIDIA(name) && c.rep.Excluded == "" {
			unchecked = true
		}
		c.hwOK = c.rep.Excluded == ""
		// Rules from the request.
		if !MatchVersion(want, c.rep.Version) {
			c.exclude(RuleVersion, fmt.Sprintf("asked %s", versionRule(want)))
		}
		if minDriver != "" && instance.CompareVersions(c.rep.Version, minDriver) < 0 {
			c.exclude(RuleCUDA, cuda.String())
		}
		if flavor != instance.FlavorAuto && c.rep.Flavor != flavor {
			c.exclude(RuleFlavor, fmt.Sprintf("asked flavour %s, set is %s", flavor, flavourText(c.rep.Flavor)))
		}
	}
	if unchecked {
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s: the cached sets name no supported-gpus.json: the GPUs present were not checked against the driver's list", name))
	}
	// flavor auto: per version, open when every GPU supports it and an open set
	// qualifies, proprietary otherwise.
	if flavor == instance.FlavorAuto {
		for _, c := range cs {
			if c.rep.Excluded != "" || c.prefers == "" || c.rep.Flavor == c.prefers {
				continue
			}
			if c.prefers == instance.FlavorProprietary {
				// An open set reaching here has no GPU lacking kernelopen, so
				// this only happens for GPUs missing from the list: already excluded.
				continue
			}
			for _, o := range cs {
				if o.rep.Excluded == "" && o.rep.Version == c.rep.Version && o.rep.Flavor == instance.FlavorOpen {
					c.exclude(RuleFlavor, "flavour auto picks open: every GPU present supports the open kernel modules")
					break
				}
			}
		}
	}
	// The newest qualifying version wins; the first set of it in index order.
	var best *cand
	for _, c := range cs {
		if c.rep.Excluded == "" && (best == nil || instance.CompareVersions(c.rep.Version, best.rep.Version) > 0) {
			best = c
		}
	}
	for _, c := range cs {
		if best != nil && c != best && c.rep.Excluded == "" {
			if c.rep.Version == best.rep.Version {
				c.exclude(RuleNotChosen, fmt.Sprintf("same version chosen from set %s (%s)", short(best.rep.ID), best.rep.From))
			} else {
				c.exclude(RuleNotChosen, fmt.Sprintf("newer qualifying version %s chosen", best.rep.Version))
			}
		}
		dd.Candidates = append(dd.Candidates, c.rep)
	}
	if best != nil {
		ch := best.rep
		dd.Chosen = &ch
		d.keep[best.rep.ID] = true
		d.chosen = append(d.chosen, best.Set)
		return dd
	}
	dd.Refusal = refusal(in, name, cs, want, flavor, cuda, gpus)
	return dd
}

// absentVersion returns, when the request asks for a version (or branch)
// that none of a driver's cached sets has, what the report and console say:
// the request cannot be honoured on this image, so the driver goes on with
// the default (the latest qualifying version, flavour auto, no CUDA minimum),
// as it does for a request that cannot be read. "" when a set has the
// version: the other rules then decide, and refuse with their reasons.
func absentVersion(req instance.Request, want string, cs []*cand) string {
	if want == instance.Latest || len(cs) == 0 {
		return ""
	}
	var held []string
	for _, c := range cs {
		if MatchVersion(want, c.rep.Version) {
			return ""
		}
		if !slices.Contains(held, c.rep.Version) {
			held = append(held, c.rep.Version)
		}
	}
	slices.SortFunc(held, func(a, b string) int { return instance.CompareVersions(b, a) })
	at := req.VersionAt
	if at == "" {
		at = req.Origin
	}
	where := req.Source
	if at != "" {
		where += " " + at
	}
	return fmt.Sprintf("asked %s (%s), which this image does not hold (it holds %s): going on with the default, the latest qualifying version, flavour auto", versionRule(want), where, strings.Join(held, ", "))
}

// signatureModules is what secureboot.State.Refusal needs of a set's modules.
func signatureModules(s *bootindex.Set) []secureboot.Module {
	mods := make([]secureboot.Module, 0, len(s.Modules))
	for _, m := range s.Modules {
		mods = append(mods, secureboot.Module{Name: m.Name, Unsigned: m.Unsigned, Signer: m.Signer, SigKey: m.SigKey})
	}
	return mods
}

// refusal explains why no set of a driver may load: what was asked, what the
// cache holds and why each was excluded, and what would work.
func refusal(in Input, name string, cs []*cand, want, flavor string, cuda instance.CUDARequirement, gpus []pci.Device) string {
	minDriver := cuda.Driver
	var b strings.Builder
	fmt.Fprintf(&b, "no %s driver will be loaded: asked %s", name, versionRule(want))
	if minDriver != "" {
		fmt.Fprintf(&b, " with CUDA %s (driver >= %s: %s)", cuda.CUDA, minDriver, cuda.Rule)
	}
	fmt.Fprintf(&b, ", flavour %s, kernel %s", flavor, in.Kernel)
	var held []string
	for _, c := range cs {
		held = append(held, fmt.Sprintf("%s %s (%s: %s)", c.rep.Version, flavourText(c.rep.Flavor), c.rep.Excluded, c.rep.Reason))
	}
	fmt.Fprintf(&b, "; the cache holds %s", strings.Join(held, "; "))
	var works []string
	byNewest := slices.Clone(cs)
	sort.SliceStable(byNewest, func(i, j int) bool {
		return instance.CompareVersions(byNewest[i].rep.Version, byNewest[j].rep.Version) > 0
	})
	for _, c := range byNewest {
		if c.hwOK {
			w := c.rep.Version
			if c.rep.Flavor != "" {
				w += " " + c.rep.Flavor
			}
			if !slices.Contains(works, w) {
				works = append(works, w)
			}
		}
	}
	if len(works) > 0 {
		fmt.Fprintf(&b, "; would work on this machine: %s (e.g. kpreload.driver=%s)", strings.Join(works, ", "), strings.Fields(works[0])[0])
		return b.String()
	}
	// Nothing would. Signatures first: the kernel would refuse every set.
	if slices.ContainsFunc(cs, func(c *cand) bool { return c.rep.Excluded == RuleSignature }) {
		fmt.Fprintf(&b, "; nothing cached would work while the kernel enforces module signatures: sign the driver's modules (a recipe's signing: key) and enroll that certificate as a Machine Owner Key")
		return b.String()
	}
	// Nothing would: say which GPUs no cached version supports.
	var unsupported []string
	for _, g := range gpus {
		ok := false
		for _, c := range cs {
			if c.list == nil {
				ok = true
				break
			}
			if chip, found := c.list.Lookup(g); found && (chip.LegacyBranch == "" || chip.Branch() == majorOf(c.rep.Version)) {
				ok = true
				break
			}
		}
		if !ok {
			unsupported = append(unsupported, g.String())
		}
	}
	if len(unsupported) > 0 {
		fmt.Fprintf(&b, "; nothing cached would work: no cached version's supported-gpus.json supports GPU %s: cache a driver version that lists it", strings.Join(unsupported, ", GPU "))
	} else {
		fmt.Fprintf(&b, "; nothing cached would work for this kernel and these GPUs: build the driver for kernel %s", in.Kernel)
	}
	return b.String()
}

// checkGPUs compares resources.gpu with the NVIDIA GPUs present; mismatches are warnings.
func (d *Decision) checkGPUs(req instance.GPU, gpus []report.SelectionGPU, haveLists bool) {
	if req.Count > 0 && req.Count != len(gpus) {
		d.Warnings = append(d.Warnings, fmt.Sprintf("resources.gpu.count asks for %d GPUs, %d NVIDIA GPU(s) present", req.Count, len(gpus)))
	}
	if req.Type == "" {
		return
	}
	if len(gpus) == 0 {
		d.Warnings = append(d.Warnings, fmt.Sprintf("resources.gpu.type asks for %s, no NVIDIA GPU present", req.Type))
		return
	}
	want := alnum(req.Type)
	for _, g := range gpus {
		switch {
		case g.Name == "" && haveLists:
			d.Warnings = append(d.Warnings, fmt.Sprintf("resources.gpu.type %s not checked for GPU %s %s: no cached supported-gpus.json names it", req.Type, g.Address, g.ID))
		case g.Name == "":
			d.Warnings = append(d.Warnings, fmt.Sprintf("resources.gpu.type %s not checked for GPU %s %s: no supported-gpus.json cached", req.Type, g.Address, g.ID))
		case !strings.Contains(alnum(g.Name), want):
			d.Warnings = append(d.Warnings, fmt.Sprintf("resources.gpu.type asks for %s, GPU %s is %s", req.Type, g.Address, g.Name))
		}
	}
}

func gpuName(g pci.Device, lists map[string]*supported.List) string {
	keys := make([]string, 0, len(lists))
	for k, l := range lists {
		if l != nil {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if c, ok := lists[k].Lookup(g); ok {
			return c.Name
		}
	}
	return ""
}

func alnum(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// otherBoards notes when a list names the device id for other subsystems only.
func otherBoards(l *supported.List, g pci.Device) string {
	if names := l.Names(g.Device); len(names) > 0 {
		return fmt.Sprintf(" (it lists device %04x only for other boards: %s)", g.Device, strings.Join(names, ", "))
	}
	return ""
}

// vermagicMismatch says why a set cannot load on the running kernel, or "".
func vermagicMismatch(s *bootindex.Set, kernel, vermagic string) string {
	for _, m := range s.Modules {
		if why := modinfo.CheckVermagic(m.Vermagic, kernel, vermagic); why != "" {
			return fmt.Sprintf("module %s: %s", m.Name, why)
		}
	}
	if len(s.Modules) == 0 {
		return "set has no modules"
	}
	return ""
}

// MatchVersion applies the version rule of the instance YAML's
// resources.driver.version to version: want is latest, exact, or a dotted
// prefix ("535" is the 535 branch, "535.261" any 535.261.x).
func MatchVersion(want, version string) bool {
	if want == instance.Latest || want == version {
		return true
	}
	w, err1 := instance.ParseVersion(want)
	v, err2 := instance.ParseVersion(version)
	if err1 != nil || err2 != nil || len(w) >= len(v) {
		return false
	}
	return slices.Equal(w, v[:len(w)])
}

// versionRule describes a version request: "latest", "branch 535", "exact 535.261.03".
func versionRule(want string) string {
	if want == instance.Latest {
		return "latest"
	}
	if !strings.Contains(want, ".") {
		return "branch " + want
	}
	return "version " + want
}

func majorOf(v string) string {
	m, _, _ := strings.Cut(v, ".")
	return m
}

// flavourText is a set's flavour s in a message: s, or "(no flavour)".
func flavourText(s string) string {
	if s == "" {
		return "(no flavour)"
	}
	return s
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// Lines renders the decision for the console, one line per driver, then the warnings.
func (d *Decision) Lines() []string {
	var out []string
	src := d.Source
	if d.Origin != "" && d.Source != instance.SourceDefault {
		src += ": " + d.Origin
	}
	for _, dd := range d.Drivers {
		if dd.Chosen != nil {
			out = append(out, fmt.Sprintf("kpreload: %s %s %s chosen (%s, request from %s)", dd.Driver, dd.Chosen.Version, flavourText(dd.Chosen.Flavor), dd.Rule, src))
		} else {
			out = append(out, fmt.Sprintf("kpreload: %s (request from %s)", dd.Refusal, src))
		}
	}
	for _, n := range d.Notes {
		out = append(out, "kpreload: note: "+n)
	}
	if r := d.Request; r.Sharing != "" {
		out = append(out, fmt.Sprintf("kpreload: GPU sharing for Kubernetes: %s, %d replicas per GPU (NVIDIA device plugin config)", r.Sharing, r.SharingReplicas))
	}
	if m := d.MIG; m != nil {
		if m.Refusal != "" {
			out = append(out, "kpreload: MIG: "+m.Refusal)
		} else {
			var parts []string
			for _, g := range m.GPUs {
				parts = append(parts, fmt.Sprintf("%s %s", g.Address, migDevices(g)))
			}
			out = append(out, fmt.Sprintf("kpreload: MIG %s for the MIG manager: %s", m.Request, strings.Join(parts, "; ")))
		}
	}
	for _, w := range d.Warnings {
		out = append(out, "kpreload: warning: "+w)
	}
	return out
}

// migDevices describes one GPU's MIG layout: "off", "on, no devices" or "7 × 1g.18gb".
func migDevices(g report.SelectionMIGGPU) string {
	if !g.Enabled {
		return "MIG off"
	}
	if len(g.Devices) == 0 {
		return "MIG on, no devices"
	}
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(g.Devices)) {
		parts = append(parts, fmt.Sprintf("%d × %s", g.Devices[p], p))
	}
	return strings.Join(parts, " + ")
}
