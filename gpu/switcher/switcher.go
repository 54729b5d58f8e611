// Package switcher changes the loaded driver version without a reboot: it finds the
// active driver set, refuses while any of its modules is in use, unloads the set in
// reverse dependency order, loads the set the decision chose (gpu/selection's
// Machine.Choose, the decision /init and kpreload plan take) through the boot loader (vermagic and digest checks, finit_module), checks that
// every device the old driver had is bound again, makes the device nodes, repoints
// the userspace link and rewrites the readiness record. When the new set fails to
// load or to bind, the previous set is loaded back.
package switcher

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kpreload/kpreload/gpu/activate"
	"github.com/kpreload/kpreload/gpu/devnodes"
	"github.com/kpreload/kpreload/gpu/selection"
	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/modname"
	"github.com/kpreload/kpreload/live/coldplug"
	"github.com/kpreload/kpreload/live/loader"
	"github.com/kpreload/kpreload/report"
	"golang.org/x/sys/unix"
)

// Kernel is the kernel surface a switch needs; tests substitute a fake that edits
// a sysfs tree.
type Kernel interface {
	// Unload removes a loaded module (delete_module(2)).
	Unload(name string) error
	// Load loads the named modules and their dependencies from idx and reports
	// one entry per module, as loader.Loader.Load does.
	Load(idx *coldplug.Index, names []string) []report.Module
}

// System is the real kernel: delete_module and kpreload's boot loader.
type System struct {
	// Loader loads modules; its Release, SysRoot and VerifyDigest should be set.
	Loader *loader.Loader
}

// Unload calls delete_module(2) without waiting for users to go away.
func (s System) Unload(name string) error {
	return unix.DeleteModule(name, unix.O_NONBLOCK)
}

// Load loads modules with the boot loader.
func (s System) Load(idx *coldplug.Index, names []string) []report.Module {
	return s.Loader.Load(idx, names)
}

// Options describe one switch.
type Options struct {
	// Machine is what selection.Gather read: the boot index (Index,
	// IndexDir) whose sets the active one is found among, and the kernel
	// (Kernel) the sets are for (required).
	Machine *selection.Machine
	// Choice is the decided target, from Machine.Choose (required): its Set
	// is loaded, its Driver decision and Forced refusal are recorded.
	Choice *selection.Choice
	// SysDir, ProcDir, DevDir and RunDir are where sysfs, procfs, /dev and /run are
	// ("/sys", "/proc", "/dev", "/run" on a running system). Each is a root for
	// what is read in it: paths and links resolve inside it (internal/inroot) and
	// files are read bounded.
	SysDir, ProcDir, DevDir, RunDir string
	// Root is where the root holding DriversDir is mounted ("/").
	Root string
	// DriversDir holds each version's userspace (activate.DriversDir).
	DriversDir string
	// Kernel performs the loads and unloads (required).
	Kernel Kernel
	// Now returns seconds since the kernel started; nil means BootTime.
	Now func() float64
	// BindTimeout bounds the wait for devices to be bound again (default 10 s).
	BindTimeout time.Duration
	// Ldconfig refreshes the linker cache after the link moved; nil skips it.
	Ldconfig func() error
	// Log receives one line per step; nil discards them.
	Log io.Writer
	// DryRun finds the active set, reports what would change and changes nothing.
	DryRun bool
}

// SetRef names one driver set of the boot index.
type SetRef struct {
	ID      string `json:"id"`
	Driver  string `json:"driver"`
	Version string `json:"version"`
	Flavor  string `json:"flavor,omitempty"`
}

func ref(s *bootindex.Set) *SetRef {
	if s == nil {
		return nil
	}
	return &SetRef{ID: s.ID, Driver: s.Driver, Version: s.Version, Flavor: s.Flavor}
}

func (r *SetRef) String() string {
	s := r.Driver + " " + r.Version
	if r.Flavor != "" {
		s += " (" + r.Flavor + ")"
	}
	return s
}

// Binding is a device bound to a driver.
type Binding struct {
	// Device is the device's sysfs name on its bus, e.g. "0000:00:03.0".
	Device string `json:"device"`
	Bus    string `json:"bus"`
	Driver string `json:"driver"`
}

// Result records what a switch did.
type Result struct {
	// From is the driver that was active (nil when none was), To the one asked for.
	From *SetRef `json:"from,omitempty"`
	To   *SetRef `json:"to"`
	// Unchanged is set when To was already active: nothing was done.
	Unchanged bool `json:"unchanged,omitempty"`
	// Unloaded lists the modules removed, in order.
	Unloaded []string `json:"unloaded,omitempty"`
	// Loaded is the loader's record of the new set's modules.
	Loaded []report.Module `json:"loaded,omitempty"`
	// Bound lists the devices bound to the active driver at the end.
	Bound []Binding `json:"bound,omitempty"`
	// RolledBack is set when the new set failed and From was loaded back.
	RolledBack bool `json:"rolled_back,omitempty"`
	// Rollback is the loader's record of the reload of From.
	Rollback []report.Module `json:"rollback,omitempty"`
	// Userspace is where /run/kpreload/driver points at the end ("" when nowhere).
	Userspace string `json:"userspace,omitempty"`
	// DeviceNodes lists the device nodes made for the active driver.
	DeviceNodes []string `json:"device_nodes,omitempty"`
	// Seconds is how long the switch took.
	Seconds  float64  `json:"seconds"`
	Warnings []string `json:"warnings,omitempty"`
	// Decision is the driver decision the switch took through the same rules
	// as /init and kpreload plan (gpu/selection), for the target's driver.
	Decision *report.SelectionDriver `json:"decision,omitempty"`
	// Forced is the refusal Options.Force overrode ("" when none).
	Forced string `json:"forced,omitempty"`
	// DryRun is set when nothing was changed because Options.DryRun asked so.
	DryRun bool `json:"dry_run,omitempty"`
}

// RefusedError is selection.RefusedError: the decision refused the target,
// as /init would refuse it at boot; nothing was changed.
type RefusedError = selection.RefusedError

// InUseError is returned when a module of the active set cannot be unloaded because
// something uses it; nothing was changed.
type InUseError struct {
	Module string
	// Reason says who uses it.
	Reason string
}

func (e *InUseError) Error() string {
	return fmt.Sprintf("module %s is in use: %s; nothing was changed", e.Module, e.Reason)
}

// BootTime returns seconds since the kernel started (CLOCK_BOOTTIME).
func BootTime() float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return float64(ts.Sec) + float64(ts.Nsec)/1e9
}

type switcher struct {
	o   Options
	res *Result
	dir string // index directory
	// before holds the devices the old driver had bound.
	before []Binding
}

func (s *switcher) logf(format string, args ...any) {
	if s.o.Log != nil {
		fmt.Fprintf(s.o.Log, format+"\n", args...)
	}
}

func (s *switcher) warnf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.res.Warnings = append(s.res.Warnings, msg)
	s.logf("warning: %s", msg)
}

// Switch makes opts.Choice's set the loaded driver. The returned Result is never nil;
// on error it says how far the switch got and whether it rolled back.
func Switch(opts Options) (*Result, error) {
	if opts.Now == nil {
		opts.Now = BootTime
	}
	if opts.BindTimeout == 0 {
		opts.BindTimeout = 10 * time.Second
	}
	if opts.DriversDir == "" {
		opts.DriversDir = activate.DriversDir
	}
	if opts.Root == "" {
		opts.Root = "/"
	}
	s := &switcher{o: opts, res: &Result{}}
	start := opts.Now()
	err := s.run()
	s.res.Seconds = opts.Now() - start
	return s.res, err
}

func (s *switcher) run() error {
	o := s.o
	if o.Machine == nil || o.Machine.Index == nil {
		return errors.New("switch: no gathered boot index")
	}
	if o.Choice == nil || o.Choice.Set == nil {
		return errors.New("switch: no decided driver set")
	}
	if o.Kernel == nil {
		return errors.New("switch: no kernel interface")
	}
	idx := o.Machine.Index
	s.dir = o.Machine.IndexDir
	cur, err := s.current(idx)
	if err != nil {
		return err
	}
	to := o.Choice.Set.Set
	s.res.From, s.res.To = ref(cur), ref(to)
	s.res.Decision = o.Choice.Driver
	if o.Choice.Forced != "" {
		s.res.Forced = o.Choice.Forced
		s.warnf("forced past the decision: %s", o.Choice.Forced)
	}
	if o.DryRun {
		s.res.DryRun = true
		s.res.Unchanged = cur != nil && cur.ID == to.ID
		s.logf("dry run: %s would be switched to; nothing was changed", ref(to))
		return nil
	}
	if cur != nil && cur.ID == to.ID {
		s.res.Unchanged = true
		s.res.Bound = s.bindings(to)
		s.res.Userspace, _ = activate.Target(o.RunDir)
		s.logf("%s is already active", ref(to))
		return nil
	}
	if cur == nil {
		s.logf("no driver active; loading %s", ref(to))
	} else {
		s.logf("switching %s -> %s", ref(cur), ref(to))
	}

	var unload, names []string
	if cur != nil {
		unload = s.loadedInUnloadOrder(cur)
		if err := s.checkUnused(unload); err != nil {
			return err
		}
		s.before = s.bindings(cur)
		// Reload the same modules the old driver had loaded, from the new set.
		for i := len(unload) - 1; i >= 0; i-- {
			if hasModule(to, unload[i]) {
				names = append(names, unload[i])
			} else {
				s.warnf("%s has no module %s; it is not loaded", ref(to), unload[i])
			}
		}
	}
	if len(names) == 0 {
		names = to.LoadOrder()
	}
	if err := activate.ClearReady(o.RunDir); err != nil {
		s.warnf("%v", err)
	}
	if err := s.unloadAll(unload); err != nil {
		return s.rollback(cur, fmt.Errorf("switch: %w", err))
	}
	mods, err := s.load(to, names)
	s.res.Loaded = mods
	if err == nil {
		err = s.verify(to, names, s.before)
	}
	if err != nil {
		return s.rollback(cur, fmt.Errorf("switch to %s: %w", ref(to), err))
	}
	s.activate(to, cur)
	return nil
}

// current finds the active driver set: the one the readiness record names, else a
// set whose modules are loaded with the set's version.
func (s *switcher) current(idx *bootindex.Index) (*bootindex.Set, error) {
	if r, err := activate.ReadReady(s.o.RunDir); err == nil && r.Set != "" {
		for i := range idx.Sets {
			if set := &idx.Sets[i]; set.ID == r.Set && s.anyLoaded(set) {
				return set, nil
			}
		}
	}
	var found []*bootindex.Set
	for i := range idx.Sets {
		set := &idx.Sets[i]
		if selection.IsKernelSet(set) || !s.anyLoaded(set) {
			continue
		}
		ok := true
		for _, m := range set.Modules {
			if v := s.moduleVersion(m.Name); v != "" && v != set.Version {
				ok = false
			}
		}
		if ok {
			found = append(found, set)
		}
	}
	switch len(found) {
	case 0:
		return nil, nil
	case 1:
		return found[0], nil
	}
	var names []string
	for _, f := range found {
		names = append(names, ref(f).String())
	}
	return nil, fmt.Errorf("switch: cannot tell which driver is active: modules of %s are loaded", strings.Join(names, " and "))
}

func hasModule(set *bootindex.Set, name string) bool {
	for _, m := range set.Modules {
		if modname.Same(m.Name, name) {
			return true
		}
	}
	return false
}

// modDir is the module's directory, a path inside SysDir.
func (s *switcher) modDir(name string) string {
	return path.Join("/module", modname.Normalize(name))
}

// loaded reports whether a module is loaded (built-in modules have no initstate).
func (s *switcher) loaded(name string) bool {
	_, err := inroot.Stat(s.o.SysDir, path.Join(s.modDir(name), "initstate"))
	return err == nil
}

func (s *switcher) anyLoaded(set *bootindex.Set) bool {
	for _, m := range set.Modules {
		if s.loaded(m.Name) {
			return true
		}
	}
	return false
}

func (s *switcher) moduleVersion(name string) string {
	b, err := inroot.ReadFile(s.o.SysDir, path.Join(s.modDir(name), "version"), inroot.MaxAttr)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// loadedInUnloadOrder returns the set's loaded modules in unload order.
func (s *switcher) loadedInUnloadOrder(set *bootindex.Set) []string {
	var out []string
	for _, n := range set.UnloadOrder() {
		if s.loaded(n) {
			out = append(out, n)
		}
	}
	return out
}

// checkUnused refuses when a module to unload is held by a module that stays or
// used by anything else (open device files, ...).
func (s *switcher) checkUnused(unload []string) error {
	going := map[string]bool{}
	for _, n := range unload {
		going[n] = true
	}
	for _, n := range unload {
		dir := s.modDir(n)
		holders, _ := inroot.ReadDir(s.o.SysDir, path.Join(dir, "holders"))
		var held []string
		for _, h := range holders {
			if !going[modname.Normalize(h.Name())] {
				return &InUseError{Module: n, Reason: fmt.Sprintf("module %s, which is not part of the driver set, depends on it; unload it first", h.Name())}
			}
			held = append(held, h.Name())
		}
		b, err := inroot.ReadFile(s.o.SysDir, path.Join(dir, "refcnt"), inroot.MaxAttr)
		if err != nil {
			return &InUseError{Module: n, Reason: fmt.Sprintf("cannot read its reference count (%v): it cannot be unloaded", err)}
		}
		refcnt, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return fmt.Errorf("switch: %s: %w", filepath.Join(s.o.SysDir, dir, "refcnt"), err)
		}
		if users := refcnt - len(held); users > 0 {
			why := fmt.Sprintf("%d user(s) besides the driver's own modules", users)
			if procs := s.deviceUsers(); len(procs) > 0 {
				why += "; processes with NVIDIA device files open: " + strings.Join(procs, ", ")
			}
			why += "; stop them (e.g. systemctl stop kpreload-persistenced) and try again"
			return &InUseError{Module: n, Reason: why}
		}
	}
	return nil
}

// deviceUsers lists processes holding /dev/nvidia* open, as "pid (comm)".
func (s *switcher) deviceUsers() []string {
	fds, _ := inroot.Glob(s.o.ProcDir, "/[0-9]*/fd/*")
	seen := map[string]bool{}
	var out []string
	for _, fd := range fds {
		t, err := inroot.Readlink(s.o.ProcDir, fd)
		if err != nil || !strings.HasPrefix(t, filepath.Join(s.o.DevDir, "nvidia")) {
			continue
		}
		pid := path.Base(path.Dir(path.Dir(fd)))
		if seen[pid] {
			continue
		}
		seen[pid] = true
		comm, _ := inroot.ReadFile(s.o.ProcDir, path.Join(pid, "comm"), inroot.MaxAttr)
		out = append(out, fmt.Sprintf("%s (%s)", pid, strings.TrimSpace(string(comm))))
	}
	return out
}

// bindings lists the devices bound to drivers the set's loaded modules registered
// (/sys/module/<m>/drivers/<bus>:<driver>, /sys/bus/<bus>/drivers/<driver>/<device>).
func (s *switcher) bindings(set *bootindex.Set) []Binding {
	var out []Binding
	for _, m := range set.Modules {
		drivers, _ := inroot.ReadDir(s.o.SysDir, path.Join(s.modDir(m.Name), "drivers"))
		for _, d := range drivers {
			bus, drv, ok := strings.Cut(d.Name(), ":")
			if !ok {
				continue
			}
			devs, _ := inroot.ReadDir(s.o.SysDir, path.Join("/bus", bus, "drivers", drv))
			for _, dev := range devs {
				if dev.Type()&fs.ModeSymlink == 0 || dev.Name() == "module" {
					continue
				}
				if _, err := inroot.Stat(s.o.SysDir, path.Join("/bus", bus, "devices", dev.Name())); err != nil {
					continue
				}
				out = append(out, Binding{Device: dev.Name(), Bus: bus, Driver: drv})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Bus+out[i].Device < out[j].Bus+out[j].Device })
	return out
}

func (s *switcher) unloadAll(names []string) error {
	for _, n := range names {
		if err := s.o.Kernel.Unload(n); err != nil {
			if errors.Is(err, unix.EWOULDBLOCK) || errors.Is(err, unix.EBUSY) {
				return fmt.Errorf("unload %s: in use (%w)", n, err)
			}
			return fmt.Errorf("unload %s: %w", n, err)
		}
		s.res.Unloaded = append(s.res.Unloaded, n)
		s.logf("unloaded %s", n)
	}
	return nil
}

// load loads names from set only and fails unless every one ends up loaded.
func (s *switcher) load(set *bootindex.Set, names []string) ([]report.Module, error) {
	ix := coldplug.NewIndex()
	ix.Add(s.dir, &bootindex.Index{Format: bootindex.FormatVersion, Kernel: s.o.Machine.Kernel, Sets: []bootindex.Set{*set}}, nil)
	mods := s.o.Kernel.Load(ix, names)
	var errs []string
	for _, m := range mods {
		switch m.Result {
		case "loaded":
			s.logf("loaded %s %s in %.0f ms", m.Name, set.Version, (m.End-m.Start)*1000)
		case "already loaded":
			s.logf("%s was already loaded", m.Name)
		default:
			errs = append(errs, fmt.Sprintf("%s %s: %s", m.Name, m.Result, m.Reason))
		}
	}
	for _, n := range names {
		if !s.loaded(n) {
			errs = append(errs, n+" is not loaded")
		}
	}
	if len(errs) > 0 {
		return mods, errors.New(strings.Join(slices.Compact(errs), "; "))
	}
	return mods, nil
}

// verify checks the loaded modules' versions and that every device bound before
// is bound again, waiting up to BindTimeout for asynchronous probes.
func (s *switcher) verify(set *bootindex.Set, names []string, before []Binding) error {
	for _, n := range names {
		if v := s.moduleVersion(n); v != "" && v != set.Version {
			return fmt.Errorf("module %s reports version %s, want %s", n, v, set.Version)
		}
	}
	deadline := time.Now().Add(s.o.BindTimeout)
	for {
		var missing []string
		for _, b := range before {
			if t, err := inroot.Readlink(s.o.SysDir, path.Join("/bus", b.Bus, "devices", b.Device, "driver")); err != nil || t == "" {
				missing = append(missing, b.Device)
			}
		}
		if len(missing) == 0 {
			s.res.Bound = s.bindings(set)
			for _, b := range s.res.Bound {
				s.logf("%s bound to %s", b.Device, b.Driver)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("device(s) %s not bound again within %s", strings.Join(missing, ", "), s.o.BindTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rollback unloads the modules this switch inserted (in reverse order) and loads
// back the ones it unloaded from cur.
func (s *switcher) rollback(cur *bootindex.Set, cause error) error {
	// The cause is the error Switch returns: the log says only that the
	// steps that follow undo the switch, so the failure is told once.
	s.logf("rolling back")
	var errs []error
	for i := len(s.res.Loaded) - 1; i >= 0; i-- {
		m := s.res.Loaded[i]
		if m.Result != "loaded" || !s.loaded(m.Name) {
			continue
		}
		if err := s.o.Kernel.Unload(m.Name); err != nil {
			errs = append(errs, fmt.Errorf("rollback: unload %s: %w", m.Name, err))
		} else {
			s.logf("rollback: unloaded %s", m.Name)
		}
	}
	if cur == nil {
		return errors.Join(append([]error{cause}, errs...)...)
	}
	unloaded := s.res.Unloaded
	if len(unloaded) > 0 {
		s.res.RolledBack = true
		var names []string
		for i := len(unloaded) - 1; i >= 0; i-- {
			names = append(names, unloaded[i])
		}
		mods, err := s.load(cur, names)
		s.res.Rollback = mods
		if err != nil {
			errs = append(errs, fmt.Errorf("rollback to %s failed too: %w", ref(cur), err))
			return errors.Join(append([]error{cause}, errs...)...)
		}
		if err := s.verify(cur, names, s.before); err != nil {
			errs = append(errs, fmt.Errorf("rollback to %s: %w", ref(cur), err))
		}
		s.logf("rolled back to %s", ref(cur))
		cause = fmt.Errorf("%w; rolled back to %s", cause, ref(cur))
	}
	s.res.Bound = s.bindings(cur)
	s.activate(cur, nil)
	return errors.Join(append([]error{cause}, errs...)...)
}

// activate makes device nodes, points the userspace link and writes the record.
func (s *switcher) activate(set, prev *bootindex.Set) {
	o := s.o
	var loaded []string
	for _, n := range set.LoadOrder() {
		if s.loaded(n) {
			loaded = append(loaded, n)
		}
	}
	r := activate.Ready{Driver: set.Driver, Version: set.Version, Flavor: set.Flavor, Set: set.ID, Kernel: o.Machine.Kernel,
		Time: o.Now(), Modules: loaded, By: "switch"}
	if prev != nil {
		r.Previous = prev.Version
	}
	r, _, problems := activate.Publish(activate.Publication{
		Ready: r, RunDir: o.RunDir, Root: o.Root, DriversDir: o.DriversDir,
		PlanNodes: func() ([]devnodes.Node, error) { return devnodes.PlanIn(o.ProcDir, "/", o.DevDir) },
		Ldconfig:  o.Ldconfig,
	})
	for _, err := range problems {
		s.warnf("%v", err)
	}
	s.res.DeviceNodes, s.res.Userspace = r.DeviceNodes, r.Userspace
	if r.Userspace != "" {
		s.logf("%s -> %s", activate.LinkPath(o.RunDir), r.Userspace)
	}
}
