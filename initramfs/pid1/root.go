package pid1

import (
	"fmt"
	"time"

	"github.com/kpreload/kpreload/initramfs/rootfs"
)

// Between two looks for a root that is not there yet, /init waits for the
// kernel's next device event, or rootRecheck at most; where it cannot
// listen for them it looks again every rootPoll. Each look scans sysfs for
// new devices (coldplug), which under emulation costs enough that looking
// every rootPoll took about 30% of the CPU from the early decision's driver
// load beside it (bench/results/slowroot-2026-12-07.md).
const (
	rootRecheck = 500 * time.Millisecond
	rootPoll    = 20 * time.Millisecond
)

// mountRoot waits for the root device (rootwait semantics), loads the filesystem
// module it needs and mounts it on the new root. It waits for a device that is
// not there yet for as long as it takes: on a machine without its root disk
// there is nothing better to do, and the console says why every few seconds. A
// device that is there but will not mount is a fault after kpreload.rootfail=
// (rootFailed): /init says why and reboots into the boot loader's fallback
// entry where one was arranged, else it keeps retrying.
func (b *Boot) mountRoot() {
	spec, err := rootfs.ParseSpec(b.flag("root", ""))
	b.rep.Root.Spec = b.flag("root", "")
	if err != nil {
		b.errorf("%v", err)
		b.rescue(err.Error())
		return
	}
	start := b.o.Now()
	next := 5 * time.Second
	var dev string
	var wait func(time.Duration)
	stop := func() {}
	for {
		dev, err = b.o.System.FindRoot(spec)
		if err == nil {
			break
		}
		// New devices may appear late (asynchronous probes, USB): pick them up.
		b.coldplug("initramfs", "initramfs", b.index)
		if waited := time.Duration((b.o.Now() - start) * float64(time.Second)); waited >= next {
			fmt.Fprintf(b.console, "kpreload: waiting for root %s (%s so far): %v\n", spec, waited.Round(time.Second), err)
			next += 5 * time.Second
			if b.flag("kpreload.debug", "") != "" && waited >= 30*time.Second {
				b.rescue(err.Error())
			}
		}
		if wait == nil {
			// Listen from now on, and look once more for what came before.
			wait, stop = b.deviceWait()
			continue
		}
		wait(rootRecheck)
	}
	stop()
	b.rep.Root.Device = dev
	fstype := b.flag("rootfstype", "")
	if fstype == "" {
		if fstype, err = rootfs.FSType(dev); err != nil {
			b.rep.Root.Error = err.Error()
			fstype = "ext4"
			b.warnf("root %s: %v; trying ext4", dev, err)
		}
	}
	b.rep.Root.FSType = fstype
	// Filesystems declare MODULE_ALIAS_FS: "fs-ext4" and so on.
	if names := b.index.Match("fs-" + fstype); len(names) > 0 {
		b.ld.Phase = "initramfs"
		b.load(names)
	}
	_, rw := b.flagOK("rw")
	opts := rootfs.Options{FSType: fstype, Flags: b.flag("rootflags", ""), RW: rw}
	// The device is there: a mount that keeps failing (no filesystem
	// support, a bad superblock) will not heal. After kpreload.rootfail=
	// /init says why and falls back, once.
	failAfter, firstFail, failed := b.rootFailAfter(), 0.0, false
	for {
		if err = b.o.System.MountRoot(dev, b.o.NewRoot, fstype, opts); err == nil {
			break
		}
		b.rep.Root.Error = err.Error()
		fmt.Fprintf(b.console, "kpreload: cannot mount root: %v; retrying\n", err)
		if firstFail == 0 {
			firstFail = b.o.Now()
		}
		if waited := time.Duration((b.o.Now() - firstFail) * float64(time.Second)); !failed && waited >= failAfter {
			failed = true
			b.rootFailed(dev, fstype, waited, err)
		}
		if b.flag("kpreload.debug", "") != "" {
			b.rescue(err.Error())
		}
		b.o.System.Sleep(2 * time.Second)
	}
	b.rep.Root.Error = ""
	b.rep.Root.Mounted = b.o.Now()
	b.event("root %s (%s) mounted from %s", spec, fstype, dev)
}

// deviceWait returns the root wait's pause: until the kernel's next device
// event (or the d it is given), else, where /init cannot listen for them,
// rootPoll; stop ends the listening.
func (b *Boot) deviceWait() (wait func(d time.Duration), stop func()) {
	wait, stop, err := b.o.System.WatchDevices()
	if err != nil {
		b.event("root wait: looking every %s: %v", rootPoll, err)
		return func(time.Duration) { b.o.System.Sleep(rootPoll) }, func() {}
	}
	b.event("root wait: woken by the kernel's device events, looking again after %s at most", rootRecheck)
	return wait, stop
}
