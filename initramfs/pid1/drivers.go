package pid1

import (
	"errors"
	"io/fs"
	"path/filepath"

	"github.com/kpreload/kpreload/gpu/activate"
	"github.com/kpreload/kpreload/gpu/devnodes"
	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/gpu/selection"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/report"
)

// requestFiles are the places, after the kernel command line, where an instance
// request can be once the root is mounted: QEMU fw_cfg (as read through its
// I/O ports before the first coldplug, else qemu_fw_cfg's sysfs item), a
// cloud-init seed disk's user-data, then the file baked into the image.
func (b *Boot) requestFiles() []instance.File {
	fw := b.fwCfgSysfs()
	if b.fwFile != nil {
		fw = *b.fwFile
	}
	return []instance.File{fw, b.seedFile(), b.imageFile()}
}

// drivers chooses, then loads, the driver sets of the initramfs and of the root
// filesystem's cache. It runs once root is mounted: the root's cache may hold
// versions the initramfs lacks and /etc/kpreload/instance.yaml is only readable
// then, so one decision over every cached set (rather than an early one over the
// initramfs alone that the root could contradict) is the one that holds. Only
// the chosen set of each driver is given to coldplug and the loader: other
// versions of the same driver never load. When the decision was taken early
// (an initramfs index marked complete, see startEarly), drivers joins what
// was loaded meanwhile instead (early). Either way the driver loaded is then
// activated.
func (b *Boot) drivers(early func()) {
	if early != nil {
		early()
		b.finishEarly()
	} else {
		b.planAndLoad(driverPlan{indexes: b.afterRootIndexes(), files: b.requestFiles()})()
	}
	b.activate()
}

// afterRootIndexes returns the initramfs's index and the root cache's, those there are.
func (b *Boot) afterRootIndexes() []planIndex {
	var out []planIndex
	if b.initIdx != nil {
		out = append(out, planIndex{idx: b.initIdx, dir: b.initDir, from: "initramfs"})
	}
	rootPath := bootindex.Path(filepath.Join(b.o.NewRoot, bootindex.RootCacheDir), b.release)
	rootIdx, err := bootindex.Read(rootPath)
	switch {
	case err == nil:
		out = append(out, planIndex{idx: rootIdx, dir: filepath.Dir(rootPath), from: "rootfs"})
	case errors.Is(err, fs.ErrNotExist):
		b.event("no module cache on root for %s", b.release)
	default:
		b.errorf("%v", err)
	}
	return out
}

// activate publishes the driver that loaded: device nodes for NVIDIA, the
// /run/kpreload/driver link to its userspace and the /run/kpreload/ready record.
// One driver is active: the requested GPU driver when it loaded, else the first
// requested one that did, else any chosen one that did.
func (b *Boot) activate() {
	d := b.decision
	if d == nil {
		return
	}
	loaded := map[string][]string{}
	for _, m := range b.rep.Modules {
		if m.Result == "loaded" && m.Set != "" {
			loaded[m.Set] = append(loaded[m.Set], m.Name)
		}
	}
	var active *report.SelectionDriver
	rank := func(dd *report.SelectionDriver) int {
		switch {
		case dd.Requested && selection.IsNVIDIA(dd.Driver):
			return 0
		case dd.Requested:
			return 1
		}
		return 2
	}
	for i := range d.Drivers {
		dd := &d.Drivers[i]
		if dd.Chosen == nil || len(loaded[dd.Chosen.ID]) == 0 {
			continue
		}
		dd.Loaded = true
		if active == nil || rank(dd) < rank(active) {
			active = dd
		}
	}
	if active == nil {
		b.event("no chosen driver set loaded a module: no driver activated")
		return
	}
	c := active.Chosen
	ready, marked, problems := activate.Publish(activate.Publication{
		Ready: activate.Ready{Driver: active.Driver, Version: c.Version, Flavor: c.Flavor, Set: c.ID, Kernel: b.release,
			Modules: loaded[c.ID], By: "init", Time: b.o.Now()},
		RunDir: b.o.RunDir, Root: b.o.NewRoot, DriversDir: activate.DriversDir,
		PlanNodes: func() ([]devnodes.Node, error) { return devnodes.Plan(b.o.ProcDir, b.o.DevDir) },
	})
	for _, err := range problems {
		if errors.Is(err, activate.ErrNoUserspace) && !selection.IsNVIDIA(active.Driver) {
			b.event("%s %s: no userspace in the image (%s/%s): %s not made", active.Driver, c.Version, activate.DriversDir, c.Version, activate.LinkPath(b.o.RunDir))
			continue
		}
		b.warnf("%s %s: %v", active.Driver, c.Version, err)
	}
	active.DeviceNodes, active.Userspace = ready.DeviceNodes, ready.Userspace
	if !marked {
		return
	}
	active.Active = true
	b.event("%s %s active: %s written", active.Driver, c.Version, activate.ReadyPath(b.o.RunDir))
}
