package switcher

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/gpu/activate"
	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/gpu/selection"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/modname"
	"github.com/kpreload/kpreload/live/coldplug"
	"github.com/kpreload/kpreload/report"
	"golang.org/x/sys/unix"
)

const release = "6.1.0-test"

// fakeKernel loads and unloads modules by editing a sysfs tree the way the kernel
// would: /sys/module/<m>/{initstate,refcnt,version,holders/,drivers/} and PCI
// driver bindings under /sys/bus/pci.
type fakeKernel struct {
	t     *testing.T
	sys   string
	calls []string
	// failLoad makes "name@version" fail to load.
	failLoad map[string]bool
	// noBind keeps a version's driver from binding its devices.
	noBind map[string]bool
	// drivers maps a module to the PCI driver it registers.
	drivers map[string]string
	// devices are the PCI devices the drivers bind.
	devices []string
}

func (k *fakeKernel) mod(name string) string { return filepath.Join(k.sys, "module", name) }

func (k *fakeKernel) isLoaded(name string) bool {
	_, err := os.Stat(filepath.Join(k.mod(name), "initstate"))
	return err == nil
}

func (k *fakeKernel) refcnt(name string) int {
	b, err := os.ReadFile(filepath.Join(k.mod(name), "refcnt"))
	if err != nil {
		k.t.Fatalf("fake kernel: %v", err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

func (k *fakeKernel) setRefcnt(name string, n int) {
	if err := os.WriteFile(filepath.Join(k.mod(name), "refcnt"), []byte(strconv.Itoa(n)+"\n"), 0o644); err != nil {
		k.t.Fatal(err)
	}
}

// insert makes a module appear as loaded, with its dependencies holding it.
func (k *fakeKernel) insert(name, version string, deps []string) {
	dir := k.mod(name)
	for _, d := range []string{"holders", "drivers"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			k.t.Fatal(err)
		}
	}
	for f, v := range map[string]string{"initstate": "live", "refcnt": "0", "version": version} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(v+"\n"), 0o644); err != nil {
			k.t.Fatal(err)
		}
	}
	for _, d := range deps {
		d = modname.Normalize(d)
		if err := os.Symlink("../../"+name, filepath.Join(k.mod(d), "holders", name)); err != nil {
			k.t.Fatal(err)
		}
		k.setRefcnt(d, k.refcnt(d)+1)
	}
	drv, ok := k.drivers[name]
	if !ok {
		return
	}
	ddir := filepath.Join(k.sys, "bus/pci/drivers", drv)
	if err := os.MkdirAll(ddir, 0o755); err != nil {
		k.t.Fatal(err)
	}
	if err := os.Symlink(ddir, filepath.Join(dir, "drivers", "pci:"+drv)); err != nil {
		k.t.Fatal(err)
	}
	if k.noBind[version] {
		return
	}
	for _, dev := range k.devices {
		if err := os.Symlink("../../devices/"+dev, filepath.Join(ddir, dev)); err != nil {
			k.t.Fatal(err)
		}
		if err := os.Symlink("../../drivers/"+drv, filepath.Join(k.sys, "bus/pci/devices", dev, "driver")); err != nil {
			k.t.Fatal(err)
		}
	}
}

func (k *fakeKernel) Unload(name string) error {
	k.calls = append(k.calls, "unload "+name)
	if !k.isLoaded(name) {
		return unix.ENOENT
	}
	if k.refcnt(name) > 0 {
		return unix.EWOULDBLOCK
	}
	if drv, ok := k.drivers[name]; ok {
		for _, dev := range k.devices {
			os.Remove(filepath.Join(k.sys, "bus/pci/devices", dev, "driver"))
		}
		os.RemoveAll(filepath.Join(k.sys, "bus/pci/drivers", drv))
	}
	mods, _ := os.ReadDir(filepath.Join(k.sys, "module"))
	for _, m := range mods {
		h := filepath.Join(k.mod(m.Name()), "holders", name)
		if _, err := os.Lstat(h); err == nil {
			os.Remove(h)
			k.setRefcnt(m.Name(), k.refcnt(m.Name())-1)
		}
	}
	return os.RemoveAll(k.mod(name))
}

func (k *fakeKernel) Load(ix *coldplug.Index, names []string) []report.Module {
	var out []report.Module
	var visit func(name string) bool
	visit = func(name string) bool {
		name = modname.Normalize(name)
		if k.isLoaded(name) {
			return true
		}
		cands := ix.ByName(name)
		if len(cands) == 0 {
			out = append(out, report.Module{Name: name, Result: "failed", Reason: "no module named " + name})
			return false
		}
		c := cands[0]
		for _, d := range c.Module.Depends {
			if !visit(d) {
				out = append(out, report.Module{Name: name, Result: "failed", Reason: "dependency " + d})
				return false
			}
		}
		k.calls = append(k.calls, "load "+name+"@"+c.Set.Version)
		if k.failLoad[name+"@"+c.Set.Version] {
			out = append(out, report.Module{Name: name, Set: c.Set.ID, Result: "failed", Reason: "kernel rejected the module", Errno: "EINVAL"})
			return false
		}
		k.insert(name, c.Set.Version, c.Module.Depends)
		out = append(out, report.Module{Name: name, Set: c.Set.ID, Path: c.File, Result: "loaded"})
		return true
	}
	for _, n := range names {
		visit(n)
	}
	return out
}

// nvidiaSet is a driver set shaped like NVIDIA's, modules listed out of order.
func nvidiaSet(id, version string) bootindex.Set {
	vm := release + " SMP preempt mod_unload modversions "
	return bootindex.Set{ID: id, Driver: "nvidia", Version: version, Flavor: "open", Dir: "../objects/sha256",
		Modules: []bootindex.Module{
			{Name: "nvidia_uvm", Path: "uvm", Vermagic: vm, Depends: []string{"nvidia"}},
			{Name: "nvidia-drm", Path: "drm", Vermagic: vm, Depends: []string{"nvidia-modeset", "drm"}},
			{Name: "nvidia", Path: "nv", Vermagic: vm},
			{Name: "nvidia_modeset", Path: "modeset", Vermagic: vm, Depends: []string{"nvidia"}},
		}}
}

type env struct {
	k    *fakeKernel
	o    Options
	root string
	// cache is the module cache; target and req are what the switch asks.
	cache  string
	target selection.Target
	req    instance.Request
}

// run gathers the machine, takes the decision for e.target and switches to
// the set it chose, as kpreload switch does.
func (e *env) run() (*Result, error) {
	m, err := selection.Gather(selection.Where{SysDir: e.o.SysDir, ProcDir: e.o.ProcDir, CacheDir: e.cache, Kernel: release})
	if err != nil {
		return &Result{}, err
	}
	c, err := m.Choose(e.req, e.target)
	if err != nil {
		return &Result{Decision: c.Driver}, err
	}
	e.o.Machine, e.o.Choice = m, c
	return Switch(e.o)
}

// newEnv makes a cache with nvidia 1.0 and 2.0, a machine with one GPU at
// 0000:00:06.0 and (when active) 1.0 loaded, bound and marked ready.
func newEnv(t *testing.T, active bool) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{root: filepath.Join(dir, "root")}
	sys := filepath.Join(dir, "sys")
	for _, d := range []string{"module", "bus/pci/drivers", "bus/pci/devices/0000:00:06.0", "bus/pci/devices/0000:00:01.0"} {
		if err := os.MkdirAll(filepath.Join(sys, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// An NVIDIA GPU (H200) and a virtio device, as the decision scans them.
	for dev, alias := range map[string]string{"0000:00:06.0": "pci:v000010DEd00002335sv000010DEsd000018BFbc03sc02i00", "0000:00:01.0": "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00"} {
		if err := os.WriteFile(filepath.Join(sys, "bus/pci/devices", dev, "modalias"), []byte(alias+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	proc := filepath.Join(dir, "proc")
	if err := os.MkdirAll(proc, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "devices"), []byte("Character devices:\n  1 mem\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"1.0", "2.0"} {
		if err := os.MkdirAll(filepath.Join(e.root, activate.DriversDir, v), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cache := filepath.Join(dir, "cache")
	if err := os.MkdirAll(filepath.Join(cache, "index"), 0o755); err != nil {
		t.Fatal(err)
	}
	idx := &bootindex.Index{Format: bootindex.FormatVersion, Kernel: release, Sets: []bootindex.Set{nvidiaSet("set-a", "1.0"), nvidiaSet("set-b", "2.0")}}
	if err := bootindex.Write(filepath.Join(cache, "index", release+".json"), idx); err != nil {
		t.Fatal(err)
	}
	e.k = &fakeKernel{t: t, sys: sys, drivers: map[string]string{"nvidia": "nvidia"}, devices: []string{"0000:00:06.0"},
		failLoad: map[string]bool{}, noBind: map[string]bool{}}
	e.k.insert("drm", "", nil) // a kernel module outside the set, already loaded
	e.cache, e.target = cache, selection.Target{Version: "2.0"}
	e.o = Options{SysDir: sys, ProcDir: proc,
		DevDir: filepath.Join(dir, "dev"), RunDir: filepath.Join(dir, "run"), Root: e.root,
		Kernel: e.k, Now: func() float64 { return 42 }, BindTimeout: 300 * time.Millisecond}
	if active {
		ix := coldplug.NewIndex()
		ix.Add(filepath.Join(cache, "index"), &bootindex.Index{Sets: idx.Sets[:1]}, nil)
		for _, m := range e.k.Load(ix, []string{"nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm"}) {
			if m.Result != "loaded" {
				t.Fatalf("set up: %+v", m)
			}
		}
		if err := activate.MarkReady(e.o.RunDir, activate.Ready{Driver: "nvidia", Version: "1.0", Set: "set-a", By: "init",
			Modules: []string{"nvidia", "nvidia_modeset", "nvidia_drm", "nvidia_uvm"}}); err != nil {
			t.Fatal(err)
		}
		if err := activate.Point(e.o.RunDir, e.root, activate.DriversDir, "1.0"); err != nil {
			t.Fatal(err)
		}
		e.k.calls = nil
	}
	return e
}

// state returns the loaded modules with their versions and the GPU's driver.
func (e *env) state(t *testing.T) (map[string]string, string) {
	t.Helper()
	mods := map[string]string{}
	for _, m := range []string{"nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm"} {
		if e.k.isLoaded(m) {
			b, _ := os.ReadFile(filepath.Join(e.k.mod(m), "version"))
			mods[m] = strings.TrimSpace(string(b))
		}
	}
	return mods, coldplug.BoundDriver(filepath.Join(e.k.sys, "bus/pci/devices/0000:00:06.0"))
}

func allAt(v string) map[string]string {
	return map[string]string{"nvidia": v, "nvidia_uvm": v, "nvidia_modeset": v, "nvidia_drm": v}
}

func (e *env) checkActive(t *testing.T, version, by, previous string) {
	t.Helper()
	mods, drv := e.state(t)
	if want := allAt(version); !reflect.DeepEqual(mods, want) || drv != "nvidia" {
		t.Errorf("loaded modules %v, GPU driver %q; want %v, \"nvidia\"", mods, drv, want)
	}
	r, err := activate.ReadReady(e.o.RunDir)
	if err != nil {
		t.Fatalf("ready record: %v", err)
	}
	if r.Version != version || r.By != by || r.Previous != previous || len(r.Modules) != 4 {
		t.Errorf("ready = %+v, want version %s by %s, previous %q, 4 modules", r, version, by, previous)
	}
	if got, _ := activate.Target(e.o.RunDir); got != activate.DriversDir+"/"+version {
		t.Errorf("driver link -> %q, want %q", got, activate.DriversDir+"/"+version)
	}
}

// TestUnloadOrder checks the switcher's unload order on a real NVIDIA
// set's dependencies: every module before the modules it uses.
func TestUnloadOrder(t *testing.T) {
	set := nvidiaSet("x", "1")
	got := set.UnloadOrder()
	want := []string{"nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("UnloadOrder = %q, want %q", got, want)
	}
	if got, want := set.LoadOrder(), []string{"nvidia", "nvidia_modeset", "nvidia_drm", "nvidia_uvm"}; !reflect.DeepEqual(got, want) {
		t.Errorf("LoadOrder = %q, want %q", got, want)
	}
}

func TestSwitch(t *testing.T) {
	e := newEnv(t, true)
	var log strings.Builder
	e.o.Log = &log
	res, err := e.run()
	if err != nil {
		t.Fatalf("Switch: %v\n%s", err, log.String())
	}
	wantCalls := []string{"unload nvidia_uvm", "unload nvidia_drm", "unload nvidia_modeset", "unload nvidia",
		"load nvidia@2.0", "load nvidia_modeset@2.0", "load nvidia_drm@2.0", "load nvidia_uvm@2.0"}
	if !reflect.DeepEqual(e.k.calls, wantCalls) {
		t.Errorf("kernel calls = %q, want %q", e.k.calls, wantCalls)
	}
	e.checkActive(t, "2.0", "switch", "1.0")
	if res.From.Version != "1.0" || res.To.Version != "2.0" || res.RolledBack || len(res.Bound) != 1 || res.Bound[0].Device != "0000:00:06.0" {
		t.Errorf("result = %+v, want 1.0 -> 2.0, GPU bound, no rollback", res)
	}
	// And back, this time found from sysfs alone (no readiness record).
	if err := activate.ClearReady(e.o.RunDir); err != nil {
		t.Fatal(err)
	}
	e.k.calls = nil
	e.target.Version = "1.0"
	if _, err := e.run(); err != nil {
		t.Fatalf("Switch back: %v", err)
	}
	e.checkActive(t, "1.0", "switch", "2.0")
	if len(e.k.calls) != 8 {
		t.Errorf("switch back: kernel calls = %q, want 4 unloads and 4 loads", e.k.calls)
	}
}

func TestSwitchAlreadyActive(t *testing.T) {
	e := newEnv(t, true)
	e.target.Version = "1.0"
	res, err := e.run()
	if err != nil || !res.Unchanged || len(e.k.calls) != 0 {
		t.Errorf("Switch(active version) = %+v, %v, calls %q; want unchanged, no calls", res, err, e.k.calls)
	}
}

func TestSwitchNothingActive(t *testing.T) {
	e := newEnv(t, false)
	if _, err := e.run(); err != nil {
		t.Fatalf("Switch: %v", err)
	}
	want := []string{"load nvidia@2.0", "load nvidia_modeset@2.0", "load nvidia_drm@2.0", "load nvidia_uvm@2.0"}
	if !reflect.DeepEqual(e.k.calls, want) {
		t.Errorf("kernel calls = %q, want %q", e.k.calls, want)
	}
	e.checkActive(t, "2.0", "switch", "")
}

func TestSwitchRefuses(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(e *env)
		want    string
	}{
		{"device open", func(e *env) { e.k.setRefcnt("nvidia", e.k.refcnt("nvidia")+1) }, "module nvidia is in use: 1 user(s)"},
		{"foreign holder", func(e *env) { e.k.insert("gdrdrv", "2.3", []string{"nvidia"}) }, "module gdrdrv, which is not part of the driver set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, true)
			tt.prepare(e)
			_, err := e.run()
			var inUse *InUseError
			if !errors.As(err, &inUse) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Switch = %v, want an InUseError containing %q", err, tt.want)
			}
			if len(e.k.calls) != 0 {
				t.Errorf("kernel calls = %q, want none", e.k.calls)
			}
			e.checkActive(t, "1.0", "init", "")
		})
	}
}

func TestSwitchRollsBack(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(e *env)
		want    string
	}{
		{"load fails", func(e *env) { e.k.failLoad["nvidia_uvm@2.0"] = true }, "nvidia_uvm failed: kernel rejected the module"},
		{"device not bound", func(e *env) { e.k.noBind["2.0"] = true }, "0000:00:06.0 not bound again"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, true)
			var log strings.Builder
			e.o.Log = &log
			tt.prepare(e)
			res, err := e.run()
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "rolled back to nvidia 1.0") {
				t.Fatalf("Switch = %v, want an error containing %q and the rollback", err, tt.want)
			}
			// The failure is told once, by the error: the steps say only
			// that they roll back.
			if strings.Contains(log.String(), tt.want) || !strings.Contains(log.String(), "rolling back") {
				t.Errorf("log repeats the failure or lacks the rollback step:\n%s", log.String())
			}
			if !res.RolledBack {
				t.Errorf("result.RolledBack = false, want true")
			}
			e.checkActive(t, "1.0", "switch", "")
			// Every 2.0 module that went in came out before 1.0 went back.
			var loaded2 []string
			for _, c := range e.k.calls {
				if strings.HasSuffix(c, "@2.0") && strings.HasPrefix(c, "load ") {
					loaded2 = append(loaded2, strings.TrimSuffix(strings.TrimPrefix(c, "load "), "@2.0"))
				}
			}
			first1 := slices.Index(e.k.calls, "load nvidia@1.0")
			if first1 < 0 {
				t.Fatalf("kernel calls = %q, want 1.0 loaded back", e.k.calls)
			}
			for _, m := range loaded2 {
				if !e.k.failLoad[m+"@2.0"] && !slices.Contains(e.k.calls[:first1], "unload "+m) {
					t.Errorf("kernel calls = %q: %s (2.0) not unloaded before the rollback", e.k.calls, m)
				}
			}
		})
	}
}

func TestSwitchBadRequests(t *testing.T) {
	tests := []struct {
		name string
		edit func(e *env)
		want string
	}{
		{"absent version", func(e *env) { e.target.Version = "3.0" }, "no cached driver set 3.0 for kernel 6.1.0-test; the cache has: nvidia 1.0 (open), nvidia 2.0 (open)"},
		{"absent branch", func(e *env) { e.target.Version = "3" }, "no cached driver set 3 for kernel 6.1.0-test"},
		{"absent flavour", func(e *env) { e.target.Flavor = "proprietary" }, "asked version 2.0, flavour proprietary"},
		{"other kernel", func(e *env) {
			if err := os.Rename(filepath.Join(e.cache, "index", release+".json"), filepath.Join(e.cache, "index", "6.12.0-other.json")); err != nil {
				t.Fatal(err)
			}
		}, "has no boot index for kernel 6.1.0-test"},
		{"no version", func(e *env) { e.target.Version = "" }, "no driver version given"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, true)
			tt.edit(e)
			if _, err := e.run(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Switch = %v, want an error containing %q", err, tt.want)
			}
			if len(e.k.calls) != 0 {
				t.Errorf("kernel calls = %q, want none", e.k.calls)
			}
		})
	}
}

// TestSwitchDecides checks that a switch takes the decision /init takes: a
// version the boot would refuse (another kernel's vermagic, below the
// instance's CUDA minimum) is refused with the decision's words and nothing
// changes; --force switches anyway and records the refusal; a dry run
// decides and changes nothing.
func TestSwitchDecides(t *testing.T) {
	cuda := func(e *env) {
		e.req.Source, e.req.Origin = "file", "instance.yaml"
		e.req.Instance.Resources.Driver.CUDA = "12.2"
	}
	otherKernel := func(e *env) {
		idx, err := bootindex.Read(filepath.Join(e.cache, "index", release+".json"))
		if err != nil {
			t.Fatal(err)
		}
		for i := range idx.Sets[1].Modules {
			idx.Sets[1].Modules[i].Vermagic = "6.12.0-other SMP preempt mod_unload modversions "
		}
		if err := bootindex.Write(filepath.Join(e.cache, "index", release+".json"), idx); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		prepare func(e *env)
		force   bool
		want    string // the refusal's words ("" when the decision chooses the target)
		rule    string // the rule that excluded the target
	}{
		{"below the instance's CUDA minimum", cuda, false, "no nvidia driver will be loaded", "cuda"},
		{"built for another kernel", otherKernel, false, "no nvidia driver will be loaded", "vermagic"},
		{"forced past the CUDA minimum", cuda, true, "", "cuda"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, true)
			tt.prepare(e)
			e.target.Force = tt.force
			res, err := e.run()
			if res.Decision == nil || len(res.Decision.Candidates) != 2 {
				t.Fatalf("result.Decision = %+v, want the nvidia decision over 2 sets", res.Decision)
			}
			var excluded string
			for _, c := range res.Decision.Candidates {
				if c.Version == "2.0" {
					excluded = c.Excluded
				}
			}
			if excluded != tt.rule {
				t.Errorf("2.0 excluded by %q, want %q", excluded, tt.rule)
			}
			if !tt.force {
				var refused *RefusedError
				if !errors.As(err, &refused) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "as /init would refuse it") {
					t.Fatalf("Switch = %v, want a RefusedError with %q", err, tt.want)
				}
				if refused.Refusal != res.Decision.Refusal {
					t.Errorf("refusal %q, decision's %q: want the same words", refused.Refusal, res.Decision.Refusal)
				}
				if len(e.k.calls) != 0 {
					t.Errorf("kernel calls = %q, want none", e.k.calls)
				}
				e.checkActive(t, "1.0", "init", "")
				return
			}
			if err != nil {
				t.Fatalf("Switch(--force) = %v", err)
			}
			if res.Forced == "" || !strings.Contains(res.Forced, "no nvidia driver will be loaded") {
				t.Errorf("result.Forced = %q, want the refusal that was overridden", res.Forced)
			}
			e.checkActive(t, "2.0", "switch", "1.0")
		})
	}

	t.Run("dry run", func(t *testing.T) {
		e := newEnv(t, true)
		e.o.DryRun = true
		res, err := e.run()
		if err != nil || !res.DryRun || res.Decision.Chosen == nil || res.Decision.Chosen.Version != "2.0" || res.From.Version != "1.0" {
			t.Fatalf("Switch(dry run) = %+v, %v; want 2.0 chosen over the active 1.0", res, err)
		}
		if len(e.k.calls) != 0 {
			t.Errorf("kernel calls = %q, want none", e.k.calls)
		}
		e.checkActive(t, "1.0", "init", "")
	})
}
