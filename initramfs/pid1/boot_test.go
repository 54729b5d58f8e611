package pid1

import (
	"encoding/base64"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/initramfs/modprobe"
	"github.com/kpreload/kpreload/internal/inroot/inroottest"
	"github.com/kpreload/kpreload/kmodcache/secureboot"
	"github.com/kpreload/kpreload/report"
)

// request is an instance YAML asking for a driver version.
func request(version string) string {
	return "resources:\n  driver:\n    version: " + version + "\n"
}

// bootWant is what a whole Boot run should have written.
type bootWant struct {
	// edu is each kpreload_edu entry as "<result> <phase> <version>".
	edu []string
	// source and chosen are the selection's request source and chosen
	// list ("" for no selection).
	source, chosen string
	// active says a driver was made active (ready written).
	active bool
	// events must appear in this order; warnings, errors and console must
	// appear somewhere, and no other warning or error may.
	events, warnings, errors, console []string
	// kernel is every module the fake kernel loaded, in order.
	kernel []string
}

// bootGot reads the same out of a run, with the substrings of want it found.
func bootGot(f *fixture, o *outcome, want bootWant) bootWant {
	var got bootWant
	versions := map[string]string{}
	for _, s := range append(slices.Clone(f.initSets), f.rootSets...) {
		versions[setID(s)] = s.version
	}
	for _, m := range o.module("kpreload_edu") {
		got.edu = append(got.edu, fmt.Sprintf("%s %s %s", m.Result, m.Phase, versions[m.Set]))
	}
	if sel := o.written.Selection; sel != nil {
		got.source = sel.Source
		var chosen []string
		for _, d := range sel.Drivers {
			if d.Chosen != nil {
				chosen = append(chosen, d.Driver+" "+d.Chosen.Version)
			} else {
				chosen = append(chosen, d.Driver+" refused")
			}
			got.active = got.active || d.Active
		}
		got.chosen = strings.Join(chosen, ", ")
	}
	// The events found in order, up to the first one missing.
	rest := o.events()
	for _, e := range want.events {
		i := strings.Index(rest, e)
		if i < 0 {
			got.events = append(got.events, "MISSING (or out of order): "+e)
			break
		}
		got.events = append(got.events, e)
		rest = rest[i+len(e):]
	}
	got.warnings = append(found(want.warnings, strings.Join(o.written.Warnings, "\n")), unexpected(o.written.Warnings, want.warnings)...)
	got.errors = append(found(want.errors, strings.Join(o.written.Errors, "\n")), unexpected(o.written.Errors, want.errors)...)
	got.console = found(want.console, o.console)
	got.kernel = o.kern.names()
	return got
}

// unexpected returns, marked, each of lines that contains none of subs: a
// warning or error the case did not expect.
func unexpected(lines, subs []string) []string {
	var out []string
	for _, l := range lines {
		if !slices.ContainsFunc(subs, func(s string) bool { return strings.Contains(l, s) }) {
			out = append(out, "UNEXPECTED: "+l)
		}
	}
	return out
}

// found returns the substrings of subs in text, and a marker for each missing one.
func found(subs []string, text string) []string {
	var out []string
	for _, s := range subs {
		if strings.Contains(text, s) {
			out = append(out, s)
		} else {
			out = append(out, "MISSING: "+s)
		}
	}
	return out
}

// The events every boot starts with.
var (
	started = "kpreload /init started"
	lateWhy = "driver decision after the root mount: the initramfs index is not marked complete"
	rootUp  = "root UUID=" + rootUUID + " (ext4) mounted from "
)

// mods is the modules the fake kernel should have loaded: the root
// filesystem's (ext4, jbd2) and names, sorted as fakeKernel.names sorts.
func mods(names ...string) []string {
	return slices.Sorted(slices.Values(append(names, "ext4", "jbd2")))
}

// TestBoot runs whole boots, early and after the root, on the fixture
// machine and checks the report each writes.
func TestBoot(t *testing.T) {
	tests := []struct {
		name    string
		capture string
		setup   func(f *fixture)
		want    bootWant
	}{{
		name: "after the root: the command line asks 1.0.0",
		setup: func(f *fixture) {
			f.initSets = []testSet{edu("1.0.0"), edu("2.0.0")}
			f.cmdline = "kpreload.driver=1.0.0"
		},
		want: bootWant{
			edu: []string{"loaded initramfs 1.0.0"}, source: instance.SourceCmdline, chosen: "kpreload-edu 1.0.0", active: true,
			events: []string{started, "boot index read: 3 sets", lateWhy, "initramfs coldplug round 1: 2 new devices, 1 modules to load", rootUp,
				"no module cache on root for " + testRelease, "driver selection (request from cmdline): kpreload-edu 1.0.0",
				"firmware searched in ", "initramfs-drivers coldplug round 1", "kpreload-edu 1.0.0: no userspace in the image", "kpreload-edu 1.0.0 active"},
			console: []string{"kpreload: kpreload-edu 1.0.0 open chosen"},
			kernel:  mods("kpreload_edu", "qemu_fw_cfg"),
		},
	}, {
		name: "early: the command line asks 2.0.0",
		setup: func(f *fixture) {
			f.initSets = []testSet{edu("1.0.0"), edu("2.0.0")}
			f.complete = true
			f.cmdline = "kpreload.driver=2.0.0"
		},
		want: bootWant{
			edu: []string{"loaded initramfs-early 2.0.0"}, source: instance.SourceCmdline, chosen: "kpreload-edu 2.0.0", active: true,
			events: []string{started, "driver selection early, before the root (complete initramfs index; request from cmdline): kpreload-edu 2.0.0",
				"initramfs coldplug round 1", rootUp, "early driver loads joined: 1 modules", "kpreload-edu 2.0.0 active"},
			console: []string{"kpreload: kpreload-edu 2.0.0 open chosen"},
		},
	}, {
		name: "early: fw_cfg read through its I/O ports",
		setup: func(f *fixture) {
			f.initSets = []testSet{edu("1.0.0"), edu("2.0.0")}
			f.complete = true
			f.sys.fwData, f.sys.fwErr = []byte(request("1.0.0")), nil
		},
		want: bootWant{
			edu: []string{"loaded initramfs-early 1.0.0"}, source: instance.SourceFwCfg, chosen: "kpreload-edu 1.0.0", active: true,
			events: []string{"fw_cfg read through its I/O ports: qemu_fw_cfg is not loaded from the initramfs", "driver selection early", "early driver loads joined"},
			kernel: mods("kpreload_edu"),
		},
	}, {
		name: "early: fw_cfg's ports closed, qemu_fw_cfg loads first",
		setup: func(f *fixture) {
			f.initSets = []testSet{edu("1.0.0"), edu("2.0.0")}
			f.complete = true
			f.sys.fwData, f.sys.fwErr = []byte(request("1.0.0")), unix.EPERM
		},
		want: bootWant{
			edu: []string{"loaded initramfs-early 1.0.0"}, source: instance.SourceFwCfg, chosen: "kpreload-edu 1.0.0", active: true,
			events: []string{"fw_cfg through its I/O ports: operation not permitted; loading qemu_fw_cfg first", "driver selection early, before the root (complete initramfs index; request from fw_cfg): kpreload-edu 1.0.0", "early driver loads joined"},
			kernel: mods("kpreload_edu", "qemu_fw_cfg"),
		},
	}, {
		name: "after the root: fw_cfg read through its ports before the first coldplug",
		setup: func(f *fixture) {
			f.initSets = []testSet{edu("1.0.0"), edu("2.0.0")}
			f.sys.fwData, f.sys.fwErr = []byte(request("1.0.0")), nil
		},
		want: bootWant{
			edu: []string{"loaded initramfs 1.0.0"}, source: instance.SourceFwCfg, chosen: "kpreload-edu 1.0.0", active: true,
			events: []string{lateWhy, "fw_cfg read through its I/O ports", "initramfs coldplug round 1", rootUp, "driver selection (request from fw_cfg): kpreload-edu 1.0.0"},
		},
	}, {
		name: "after the root: a cloud-init seed's user-data",
		setup: func(f *fixture) {
			f.initSets = []testSet{edu("1.0.0"), edu("2.0.0")}
			f.seed("#cloud-config\nwrite_files:\n  - path: /etc/kpreload/instance.yaml\n    content: |\n      resources:\n        driver:\n          version: 1.0.0\n")
		},
		want: bootWant{
			edu: []string{"loaded initramfs 1.0.0"}, source: instance.SourceSeed, chosen: "kpreload-edu 1.0.0", active: true,
			events: []string{rootUp, "NoCloud seed ", ": user-data read (", "driver selection (request from seed): kpreload-edu 1.0.0"},
			kernel: mods("kpreload_edu", "nls_cp437", "vfat"),
		},
	}, {
		name: "after the root: a seed's deprecated kpreload: key, honoured with a note",
		setup: func(f *fixture) {
			f.initSets = []testSet{edu("1.0.0"), edu("2.0.0")}
			f.seed("#cloud-config\nkpreload:\n  resources:\n    driver:\n      version: 1.0.0\n")
		},
		want: bootWant{
			edu: []string{"loaded initramfs 1.0.0"}, source: instance.SourceSeed, chosen: "kpreload-edu 1.0.0", active: true,
			events:  []string{rootUp, "NoCloud seed ", ": user-data read (", "driver selection (request from seed): kpreload-edu 1.0.0"},
			console: []string{"kpreload: note: seed: the top-level kpreload: key of #cloud-config is deprecated: cloud-init 23.4 and later reject it"},
			kernel:  mods("kpreload_edu", "nls_cp437", "vfat"),
		},
	}, {
		name: "after the root: a seed whose user-data is a FIFO is refused, not waited on",
		setup: func(f *fixture) {
			f.initSets = []testSet{edu("1.0.0"), edu("2.0.0")}
			f.seed("")
			f.sys.seedUserData = func(p string) error { return unix.Mkfifo(p, 0o644) }
			f.t.Cleanup(func() { inroottest.Release(f.path("run/kpreload/seed/user-data")) })
		},
		want: bootWant{
			edu: []string{"loaded initramfs 2.0.0"}, source: instance.SourceDefault, chosen: "kpreload-edu 2.0.0", active: true,
			events: []string{rootUp, "driver selection (request from default): kpreload-edu 2.0.0"},
			errors: []string{"instance request from seed ignored: NoCloud seed ", "user-data: not a regular file: it is a named pipe"},
			kernel: mods("kpreload_edu", "nls_cp437", "vfat"),
		},
	}, {
		name: "after the root: a seed whose user-data links out of the seed is not followed out",
		setup: func(f *fixture) {
			f.initSets = []testSet{edu("1.0.0"), edu("2.0.0")}
			f.write("outside/user-data", "#cloud-config\nkpreload:\n  resources:\n    driver:\n      version: 1.0.0\n")
			f.seed("")
			f.sys.seedUserData = func(p string) error { return os.Symlink(f.path("outside/user-data"), p) }
		},
		want: bootWant{
			edu: []string{"loaded initramfs 2.0.0"}, source: instance.SourceDefault, chosen: "kpreload-edu 2.0.0", active: true,
			events: []string{rootUp, "driver selection (request from default): kpreload-edu 2.0.0"},
			// The absolute link is taken from the seed's top, where nothing is.
			errors: []string{"instance request from seed ignored: NoCloud seed ", "no user-data (user-data)"},
			kernel: mods("kpreload_edu", "nls_cp437", "vfat"),
		},
	}, {
		name: "after the root: the image's instance file",
		setup: func(f *fixture) {
			f.initSets = []testSet{edu("1.0.0"), edu("2.0.0")}
			f.write("newroot/etc/kpreload/instance.yaml", request("1.0.0"))
		},
		want: bootWant{
			edu: []string{"loaded initramfs 1.0.0"}, source: instance.SourceImage, chosen: "kpreload-edu 1.0.0", active: true,
			events: []string{"driver selection (request from image): kpreload-edu 1.0.0"},
		},
	}, {
		name: "after the root: the image's instance file is a FIFO, refused, not waited on",
		setup: func(f *fixture) {
			f.initSets = []testSet{edu("1.0.0"), edu("2.0.0")}
			f.mkdir("newroot/etc/kpreload")
			inroottest.FIFO(f.t, f.path("newroot/etc/kpreload/instance.yaml"))
		},
		want: bootWant{
			edu: []string{"loaded initramfs 2.0.0"}, source: instance.SourceDefault, chosen: "kpreload-edu 2.0.0", active: true,
			events: []string{"driver selection (request from default): kpreload-edu 2.0.0"},
			errors: []string{"instance request from image ignored: ", "etc/kpreload/instance.yaml: not a regular file: it is a named pipe"},
		},
	}, {
		name: "after the root: the image's instance file links out of the root, and is read inside it",
		setup: func(f *fixture) {
			f.initSets = []testSet{edu("1.0.0"), edu("2.0.0")}
			f.write("outside/instance.yaml", request("1.0.0"))
			f.mkdir("newroot/etc/kpreload")
			if err := os.Symlink(f.path("outside/instance.yaml"), f.path("newroot/etc/kpreload/instance.yaml")); err != nil {
				f.t.Fatal(err)
			}
		},
		want: bootWant{
			edu: []string{"loaded initramfs 2.0.0"}, source: instance.SourceDefault, chosen: "kpreload-edu 2.0.0", active: true,
			events: []string{"driver selection (request from default): kpreload-edu 2.0.0"},
		},
	}, {
		name: "early: the initramfs's copy of the instance file, which the root's contradicts",
		setup: func(f *fixture) {
			f.initSets = []testSet{edu("1.0.0"), edu("2.0.0")}
			f.complete = true
			f.write("initramfs/etc/kpreload/instance.yaml", request("1.0.0"))
			f.write("newroot/etc/kpreload/instance.yaml", request("2.0.0"))
		},
		want: bootWant{
			edu: []string{"loaded initramfs-early 1.0.0"}, source: instance.SourceImage, chosen: "kpreload-edu 1.0.0", active: true,
			events:   []string{"driver selection early, before the root (complete initramfs index; request from image)"},
			warnings: []string{"the root's etc/kpreload/instance.yaml differs from the initramfs's copy the early decision used: regenerate the initramfs"},
		},
	}, {
		name: "after the root: the root's cache holds a newer version",
		setup: func(f *fixture) {
			f.initSets = []testSet{edu("1.0.0")}
			f.rootSets = []testSet{edu("2.0.0")}
		},
		want: bootWant{
			edu: []string{"loaded rootfs 2.0.0"}, source: instance.SourceDefault, chosen: "kpreload-edu 2.0.0", active: true,
			events: []string{rootUp, "driver selection (request from default): kpreload-edu 2.0.0", "rootfs coldplug round 1", "root cache: 1 sets for " + testRelease, "kpreload-edu 2.0.0 active"},
		},
	}, {
		name: "early: the root's cache has a set the initramfs lacks",
		setup: func(f *fixture) {
			f.initSets = []testSet{edu("1.0.0")}
			f.rootSets = []testSet{edu("2.0.0")}
			f.complete = true
		},
		want: bootWant{
			edu: []string{"loaded initramfs-early 1.0.0"}, source: instance.SourceDefault, chosen: "kpreload-edu 1.0.0", active: true,
			warnings: []string{"the root's cache has kpreload-edu 2.0.0 (set " + setID(edu("2.0.0"))[:12] + "), which this initramfs (marked complete) lacks"},
		},
	}, {
		name: "kpreload.early=0 keeps the decision after the root",
		setup: func(f *fixture) {
			f.initSets = []testSet{edu("1.0.0")}
			f.complete = true
			f.cmdline = "kpreload.early=0"
		},
		want: bootWant{
			edu: []string{"loaded initramfs 1.0.0"}, source: instance.SourceDefault, chosen: "kpreload-edu 1.0.0", active: true,
			events: []string{"driver decision after the root mount: kpreload.early=0", rootUp, "driver selection (request from default)"},
		},
	}, {
		name: "a module file whose digest is wrong is refused",
		setup: func(f *fixture) {
			f.initSets = []testSet{{corrupt: true, driver: "kpreload-edu", version: "1.0.0", flavor: "open", module: "kpreload_edu", alias: edu("").alias}}
		},
		want: bootWant{
			edu: []string{"refused initramfs 1.0.0"}, source: instance.SourceDefault, chosen: "kpreload-edu 1.0.0",
			events: []string{"no chosen driver set loaded a module: no driver activated"},
			kernel: mods(),
		},
	}, {
		name: "early: a driver whose init fails",
		setup: func(f *fixture) {
			f.initSets = []testSet{edu("1.0.0")}
			f.complete = true
			f.kern.errs["kpreload_edu"] = unix.EIO
		},
		want: bootWant{
			edu: []string{"failed initramfs-early 1.0.0"}, source: instance.SourceDefault, chosen: "kpreload-edu 1.0.0",
			events: []string{"early driver loads joined: 1 modules", "no chosen driver set loaded a module"},
			kernel: mods(),
		},
	}, {
		name: "a flavour no cached set has is refused",
		setup: func(f *fixture) {
			f.initSets = []testSet{edu("1.0.0")}
			f.cmdline = "kpreload.driver=1.0.0 kpreload.flavor=proprietary"
		},
		want: bootWant{
			source: instance.SourceCmdline, chosen: "kpreload-edu refused",
			events:  []string{"driver selection (request from cmdline): kpreload-edu refused", "no chosen driver set loaded a module"},
			console: []string{"no kpreload-edu driver will be loaded"},
			kernel:  mods("qemu_fw_cfg"),
		},
	}, {
		name: "unsigned driver sets while the kernel enforces signatures",
		setup: func(f *fixture) {
			f.initSets = []testSet{{unsigned: true, driver: "kpreload-edu", version: "1.0.0", flavor: "open", module: "kpreload_edu", alias: edu("").alias}}
			f.write("sys/module/module/parameters/sig_enforce", "Y\n")
		},
		want: bootWant{
			source: instance.SourceDefault, chosen: "kpreload-edu refused",
			events:  []string{"module signatures", "the kernel enforces module signatures: unsigned modules are refused before loading", "kpreload-edu refused"},
			console: []string{"module kpreload_edu is unsigned"},
			kernel:  mods(),
		},
	}, {
		name: "bad requests are skipped, the default is used",
		setup: func(f *fixture) {
			f.initSets = []testSet{edu("1.0.0"), edu("2.0.0")}
			f.complete = true
			f.cmdline = "kpreload.instance=!!!"
			f.sys.fwData, f.sys.fwErr = []byte("resources: [\n"), nil
		},
		want: bootWant{
			edu: []string{"loaded initramfs-early 2.0.0"}, source: instance.SourceDefault, chosen: "kpreload-edu 2.0.0", active: true,
			errors: []string{"kernel command line kpreload.instance=: not base64", FwCfgPortsOrigin + ": yaml: line 1"},
		},
	}, {
		name: "kpreload.load= loads a driver without its device",
		setup: func(f *fixture) {
			f.initSets = []testSet{nvidia("550.163.01", "open")}
			f.cmdline = "kpreload.load=nvidia,nosuch kpreload.load_timeout=x kpreload.load_nice=99 nvidia.NVreg_Test=1"
		},
		want: bootWant{
			source: instance.SourceDefault, chosen: "nvidia 550.163.01",
			events: []string{"initramfs: loading nvidia (kpreload.load)", "no chosen driver set loaded a module"},
			warnings: []string{"kpreload.load: module nosuch is in no cached set for " + testRelease,
				`kpreload.load_timeout="x": want seconds`, `kpreload.load_nice="99": want a nice value`},
			kernel: mods(),
		},
	}, {
		// A new kernel the cache has no cells for yet: nothing to load,
		// nothing asked, nothing to warn about.
		name:  "early: no driver sets and no request",
		setup: func(f *fixture) { f.complete = true },
		want: bootWant{
			source: instance.SourceDefault,
			kernel: mods(),
		},
	}, {
		name:    "H200 VM: the NVIDIA driver for its GPU",
		capture: "h200-gpu-vm",
		setup: func(f *fixture) {
			f.initSets = []testSet{nvidia("535.261.03", "open"), nvidia("550.163.01", "open"), edu("1.0.0")}
			f.complete = true
			f.cmdline = "kpreload.driver=535"
		},
		want: bootWant{
			edu: []string{"loaded initramfs-early 1.0.0"}, source: instance.SourceCmdline, chosen: "kpreload-edu 1.0.0, nvidia 535.261.03", active: true,
			events: []string{"driver selection early, before the root (complete initramfs index; request from cmdline): kpreload-edu 1.0.0, nvidia 535.261.03", "early driver loads joined: 2 modules", "nvidia 535.261.03 active"},
			// The fixture's root has no userspace for the driver.
			warnings: []string{"nvidia 535.261.03: device nodes: ", "nvidia 535.261.03: userspace: activate: driver 535.261.03: no userspace directory"},
		},
	}, {
		name:    "H100 VM: the NVIDIA driver after the root",
		capture: "h100-gpu-vm",
		setup: func(f *fixture) {
			f.initSets = []testSet{nvidia("550.163.01", "open")}
			f.rootSets = []testSet{nvidia("550.163.01", "proprietary")}
			f.cmdline = "kpreload.flavor=proprietary"
		},
		want: bootWant{
			source: instance.SourceCmdline, chosen: "nvidia 550.163.01", active: true,
			events: []string{"driver selection (request from cmdline): nvidia 550.163.01", "rootfs coldplug round 1", "nvidia 550.163.01 active"},
			// The fixture has no /proc/devices and no userspace for the driver.
			warnings: []string{"nvidia 550.163.01: device nodes: device majors: open ", "nvidia 550.163.01: userspace: activate: driver 550.163.01: no userspace directory"},
			kernel:   mods("nvidia", "qemu_fw_cfg", "virtio_pci"),
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.capture)
			tt.setup(f)
			o := f.boot()
			if o.written == nil {
				t.Fatalf("no report written; console:\n%s", o.console)
			}
			want := tt.want
			if want.kernel == nil {
				want.kernel = bootGot(f, o, want).kernel // checked only where the case says
			}
			got := bootGot(f, o, want)
			if !equalWant(got, want) {
				t.Errorf("got  %+v\nwant %+v\nevents:\n%s\nconsole:\n%s", got, want, o.events(), o.console)
			}
			if len(o.sys.switched) != 1 || o.sys.switched[0] != f.path("newroot")+" /sbin/init" {
				t.Errorf("switch_root calls %q, want one into %s", o.sys.switched, f.path("newroot"))
			}
		})
	}
}

// equalWant compares two bootWants field by field (nil and empty alike).
func equalWant(a, b bootWant) bool {
	return slices.Equal(a.edu, b.edu) && a.source == b.source && a.chosen == b.chosen && a.active == b.active &&
		slices.Equal(a.events, b.events) && slices.Equal(a.warnings, b.warnings) && slices.Equal(a.errors, b.errors) &&
		slices.Equal(a.console, b.console) && slices.Equal(a.kernel, b.kernel)
}

// TestBootDevices checks the report's devices and the module entries of
// both paths: the edu device matched by the chosen set and bound, the
// others recorded once with what matched them.
func TestBootDevices(t *testing.T) {
	for _, tt := range []struct {
		name     string
		complete bool
		want     report.Device
	}{
		{"after the root", false, report.Device{Modalias: eduAlias, Modules: []string{"kpreload_edu"}, Driver: "kpreload_edu", Decision: "matched (initramfs)"}},
		{"early", true, report.Device{Modalias: eduAlias, Modules: []string{"kpreload_edu"}, Driver: "kpreload_edu", Decision: "matched (initramfs, early)"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, "h200-gpu-vm")
			f.initSets = []testSet{edu("1.0.0")}
			f.complete = tt.complete
			o := f.boot()
			got := o.device(eduAddr)
			got.Path = ""
			if !equalDevice(got, tt.want) {
				t.Errorf("edu device %+v, want %+v", got, tt.want)
			}
			virtio := o.device("0000:00:01.0")
			if virtio.Decision != "matched (initramfs)" || !slices.Equal(virtio.Modules, []string{"virtio_pci"}) || virtio.Driver != "virtio-pci" {
				t.Errorf("virtio device %+v, want virtio_pci matched, bound to virtio-pci", virtio)
			}
			paths := map[string]bool{}
			for _, d := range o.written.Devices {
				if paths[d.Path] {
					t.Errorf("device %s recorded twice", d.Path)
				}
				paths[d.Path] = true
			}
			if len(paths) != 9 { // 7 PCI devices of the capture, edu, fw_cfg's ACPI device
				t.Errorf("%d devices recorded, want 9: %+v", len(paths), o.written.Devices)
			}
			if r := o.written; r.DriversReady < r.InitStart || r.SwitchRoot < r.Root.Mounted || r.Root.Device != f.path("dev/vda2") || r.Kernel != testRelease {
				t.Errorf("report times and root: %+v %+v", r.Root, r)
			}
		})
	}
}

func equalDevice(a, b report.Device) bool {
	return a.Path == b.Path && a.Modalias == b.Modalias && slices.Equal(a.Modules, b.Modules) && a.Driver == b.Driver && a.Decision == b.Decision
}

// TestBootRoot covers the root's lookup and hand-over when they do not go
// straight: a root that appears late, one that never does, a failing mount,
// a root without its init, a switch_root that fails.
func TestBootRoot(t *testing.T) {
	tests := []struct {
		name  string
		setup func(f *fixture)
		check func(t *testing.T, f *fixture, o *outcome)
	}{{
		name:  "the root appears after three lookups",
		setup: func(f *fixture) { f.sys.findAfter = 3 },
		check: func(t *testing.T, f *fixture, o *outcome) {
			if o.sys.finds != 4 || o.written == nil || o.written.Root.Device != f.path("dev/vda2") {
				t.Errorf("%d lookups, root %+v; want the 4th to find it", o.sys.finds, o.written)
			}
		},
	}, {
		name: "the root never appears",
		setup: func(f *fixture) {
			f.sys.roots = nil
			f.sys.sleepLimit = 12e9
			f.write("initramfs/bin/sh", "")
		},
		check: func(t *testing.T, f *fixture, o *outcome) {
			if o.written != nil || len(o.sys.switched) != 0 {
				t.Errorf("a report was written (%v) or switch_root called (%q) without a root", o.written != nil, o.sys.switched)
			}
			want := "kpreload: waiting for root UUID=" + rootUUID + " (5s so far): no block device with UUID=" + rootUUID
			if got := strings.Count(o.console, "kpreload: waiting for root "); got != 2 || !strings.Contains(o.console, want) {
				t.Errorf("console says %d times it waits, want 2 (%q):\n%s", got, want, o.console)
			}
			if o.rep.Root.Device != "" || len(o.rep.Devices) == 0 {
				t.Errorf("root %+v, %d devices; want no root and the devices coldplugged", o.rep.Root, len(o.rep.Devices))
			}
		},
	}, {
		name: "the root never appears, kpreload.debug: the emergency shell after 30 s",
		setup: func(f *fixture) {
			f.sys.roots = nil
			f.sys.sleepLimit = 31e9
			f.cmdline = "kpreload.debug"
			f.write("initramfs/bin/sh", "")
		},
		check: func(t *testing.T, f *fixture, o *outcome) {
			if o.sys.shells == 0 || !strings.Contains(o.console, "kpreload: emergency shell; exit to continue") {
				t.Errorf("%d shells; console:\n%s", o.sys.shells, o.console)
			}
		},
	}, {
		name: "the first mount fails",
		setup: func(f *fixture) {
			f.sys.mountErrs = 1
			f.cmdline = "rootfstype=ext4 rootflags=discard rw"
		},
		check: func(t *testing.T, f *fixture, o *outcome) {
			if !strings.Contains(o.console, "kpreload: cannot mount root: mount ") || o.written == nil || o.written.Root.Error != "" {
				t.Errorf("console:\n%s\nreport root %+v", o.console, o.written)
			}
			if opts := o.sys.rootMountedOptions; opts.FSType != "ext4" || opts.Flags != "discard" || !opts.RW {
				t.Errorf("root mounted with %+v, want ext4, discard, rw", opts)
			}
		},
	}, {
		name:  "no root= on the command line",
		setup: func(f *fixture) { f.noRoot = true },
		check: func(t *testing.T, f *fixture, o *outcome) {
			if o.written == nil || !slices.Contains(o.written.Errors, "no root= on the kernel command line") {
				t.Errorf("report %+v; want the missing root= in its errors", o.written)
			}
			if !strings.Contains(o.console, "kpreload: add kpreload.debug to the kernel command line") {
				t.Errorf("console:\n%s", o.console)
			}
		},
	}, {
		name: "a root without /sbin/init, whose switch_root fails",
		setup: func(f *fixture) {
			if err := os.Remove(f.path("newroot/sbin/init")); err != nil {
				f.t.Fatal(err)
			}
			f.sys.switchErr = unix.ENOENT
			f.sys.sleepLimit = 0
		},
		check: func(t *testing.T, f *fixture, o *outcome) {
			if o.written == nil || len(o.written.Errors) != 1 || !strings.HasPrefix(o.written.Errors[0], "/sbin/init not found on root: ") {
				t.Errorf("report %+v; want /sbin/init's absence in its errors", o.written)
			}
			if want := []string{"/sbin/init", "/etc/init", "/bin/init", "/bin/sh"}; !slices.Equal(o.sys.execs, want) {
				t.Errorf("exec'd %q, want the fallbacks %q", o.sys.execs, want)
			}
			if !strings.Contains(o.console, "kpreload: switch_root to /sbin/init failed: no such file or directory") || !strings.Contains(o.console, "kpreload: cannot continue booting: no init could be started") {
				t.Errorf("console:\n%s", o.console)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, "")
			f.initSets = []testSet{edu("1.0.0")}
			tt.setup(f)
			tt.check(t, f, f.boot())
		})
	}
}

// TestBootSetup covers what setup reads and reports: no boot index, an index
// for another kernel, a kernel without securityfs, the report's channels,
// and the firmware search path put back before switch_root.
func TestBootSetup(t *testing.T) {
	t.Run("no boot index", func(t *testing.T) {
		f := newFixture(t, "")
		f.noIndex = true
		o := f.boot()
		if o.written == nil || len(o.written.Errors) != 1 || !strings.HasSuffix(o.written.Errors[0], ": no drivers will be loaded from the initramfs") || len(o.kern.names()) != 0 {
			t.Errorf("report %+v, loads %q; want the missing index in its errors and nothing loaded", o.written, o.kern.names())
		}
	})
	t.Run("an index for another kernel", func(t *testing.T) {
		f := newFixture(t, "")
		f.indexKernel = "5.10.0-1-amd64"
		o := f.boot()
		if want := "boot index is for kernel 5.10.0-1-amd64, running " + testRelease; o.written == nil || !slices.Contains(o.written.Errors, want) {
			t.Errorf("report %+v; want %q", o.written, want)
		}
	})
	t.Run("channels, securityfs, firmware path", func(t *testing.T) {
		f := newFixture(t, "")
		f.initSets = []testSet{edu("1.0.0")}
		channel := f.path("ttyS1")
		f.write("ttyS1", "")
		f.cmdline = "kpreload.report=" + channel + " kpreload.console_report=1"
		f.sys.securityfsMissing = true
		o := f.boot()
		line, err := os.ReadFile(channel)
		if err != nil || !strings.HasPrefix(string(line), report.ConsolePrefix) {
			t.Errorf("report channel holds %q (%v), want the report's console line", line, err)
		}
		// The stored report names the channel, for kpreload's units after switch_root.
		if o.written == nil || o.written.Channel != channel {
			t.Errorf("stored report %+v, want channel %q", o.written, channel)
		}
		if !strings.Contains(o.console, report.ConsolePrefix) || !strings.Contains(o.console, o.written.Summary()) {
			t.Errorf("console lacks the report line or summary:\n%s", o.console)
		}
		if !strings.Contains(o.events(), "securityfs: no such device: the lockdown mode is read from the command line") {
			t.Errorf("events:\n%s", o.events())
		}
		param, _ := os.ReadFile(f.path("sys/module/firmware_class/parameters/path"))
		if string(param) != "\n" || !strings.Contains(o.events(), "firmware searched in "+f.path("newroot/lib/firmware")) {
			t.Errorf("firmware path %q after the boot, events:\n%s", param, o.events())
		}
	})
	t.Run("the report channel named through fw_cfg", func(t *testing.T) {
		f := newFixture(t, "")
		f.initSets = []testSet{edu("1.0.0")}
		channel := f.path("ttyS1")
		f.write("ttyS1", "")
		f.sys.fwFiles = map[string][]byte{report.ChannelFwCfgName: []byte(channel + "\n")}
		o := f.boot()
		line, err := os.ReadFile(channel)
		if err != nil || !strings.HasPrefix(string(line), report.ConsolePrefix) {
			t.Errorf("report channel holds %q (%v), want the report's console line", line, err)
		}
		if o.written == nil || o.written.Channel != channel {
			t.Errorf("stored report %+v, want channel %q", o.written, channel)
		}
	})
	t.Run("the report channel named through fw_cfg, qemu_fw_cfg loaded", func(t *testing.T) {
		f := newFixture(t, "")
		f.initSets = []testSet{edu("1.0.0")}
		channel := f.path("ttyS1")
		f.write("ttyS1", "")
		f.write("sys/firmware/qemu_fw_cfg/by_name/"+report.ChannelFwCfgName+"/raw", channel)
		f.boot()
		line, err := os.ReadFile(channel)
		if err != nil || !strings.HasPrefix(string(line), report.ConsolePrefix) {
			t.Errorf("report channel holds %q (%v), want the report's console line", line, err)
		}
	})
	t.Run("a report channel in fw_cfg that is not a path", func(t *testing.T) {
		f := newFixture(t, "")
		f.initSets = []testSet{edu("1.0.0")}
		f.sys.fwFiles = map[string][]byte{report.ChannelFwCfgName: []byte("ttyS1")}
		o := f.boot()
		if want := `fw_cfg opt/kpreload/report: "ttyS1" is not an absolute device path; no report channel`; !strings.Contains(o.console, want) && (o.written == nil || !slices.Contains(o.written.Warnings, want)) {
			t.Errorf("console %s\nreport %+v\nwant %q", o.console, o.written, want)
		}
		if o.written == nil || o.written.Channel != "" {
			t.Errorf("stored report %+v, want no channel", o.written)
		}
	})
	t.Run("a report channel in fw_cfg longer than a path", func(t *testing.T) {
		f := newFixture(t, "")
		f.initSets = []testSet{edu("1.0.0")}
		f.write("sys/firmware/qemu_fw_cfg/by_name/"+report.ChannelFwCfgName+"/raw", "/"+strings.Repeat("a", 1<<20))
		o := f.boot()
		if want := `fw_cfg opt/kpreload/report: more than 4096 bytes; no report channel`; !strings.Contains(o.console, want) && (o.written == nil || !slices.Contains(o.written.Warnings, want)) {
			t.Errorf("console %s\nreport %+v\nwant %q", o.console, o.written, want)
		}
	})
	t.Run("an image built for Secure Boot, booted without it", func(t *testing.T) {
		f := newFixture(t, "")
		f.initSets = []testSet{edu("1.0.0")}
		f.cmdline = secureboot.ExpectFlag + "=" + secureboot.ExpectValue
		o := f.boot()
		sb := o.written.SecureBoot
		want := "this image was built for Secure Boot (kpreload.secureboot=expected), but Secure Boot is not-uefi"
		if sb == nil || !sb.Expected || !strings.HasPrefix(sb.Fault, want) || !slices.Contains(o.written.Warnings, sb.Fault) {
			t.Errorf("secure_boot %+v, warnings %q; want the fault %q", sb, o.written.Warnings, want)
		}
		if got := bootGot(f, o, bootWant{}).edu; !slices.Equal(got, []string{"loaded initramfs 1.0.0"}) {
			t.Errorf("kpreload_edu %q, want it loaded: the boot goes on", got)
		}
	})
	t.Run("the module helper link, made before the first load", func(t *testing.T) {
		f := newFixture(t, "")
		f.initSets = []testSet{edu("1.0.0")}
		o := f.boot()
		if got, err := os.Readlink(f.path("initramfs/" + modprobe.HelperPath)); err != nil || got != modprobe.HelperTarget {
			t.Errorf("%s links to %q (%v), want %q", modprobe.HelperPath, got, err, modprobe.HelperTarget)
		}
		if len(o.kern.helperLinked) == 0 || slices.Contains(o.kern.helperLinked, false) {
			t.Errorf("link there at each load: %v, want true for every one of at least one load", o.kern.helperLinked)
		}
		if len(o.written.Warnings) != 0 {
			t.Errorf("warnings %q, want none", o.written.Warnings)
		}
	})
	t.Run("a module helper link that cannot be made is a warning", func(t *testing.T) {
		f := newFixture(t, "")
		f.initSets = []testSet{edu("1.0.0")}
		f.write("initramfs/"+modprobe.HelperPath, "not /init")
		o := f.boot()
		want := "the kernel's module requests are not served before switch_root"
		if o.written == nil || !slices.ContainsFunc(o.written.Warnings, func(w string) bool { return strings.Contains(w, want) }) {
			t.Errorf("report %+v, want a warning containing %q", o.written, want)
		}
		if got := bootGot(f, o, bootWant{}).edu; !slices.Equal(got, []string{"loaded initramfs 1.0.0"}) {
			t.Errorf("kpreload_edu %q, want it loaded: the boot goes on", got)
		}
	})
	t.Run("a firmware path the command line chose is left alone", func(t *testing.T) {
		f := newFixture(t, "")
		f.initSets = []testSet{edu("1.0.0")}
		f.write("sys/module/firmware_class/parameters/path", "/custom\n")
		o := f.boot()
		param, _ := os.ReadFile(f.path("sys/module/firmware_class/parameters/path"))
		if string(param) != "/custom\n" || strings.Contains(o.events(), "firmware searched in") {
			t.Errorf("firmware path %q after the boot, events:\n%s", param, o.events())
		}
	})
}

// TestBootInstanceBase64 checks a whole request passed as base64 on the
// command line reaches the decision.
func TestBootInstanceBase64(t *testing.T) {
	f := newFixture(t, "")
	f.initSets = []testSet{edu("1.0.0"), edu("2.0.0")}
	f.complete = true
	f.cmdline = "kpreload.instance=" + base64.StdEncoding.EncodeToString([]byte(request("1.0.0")))
	o := f.boot()
	if got := bootGot(f, o, bootWant{}); !slices.Equal(got.edu, []string{"loaded initramfs-early 1.0.0"}) || got.source != instance.SourceCmdline {
		t.Errorf("got %+v, want 1.0.0 early from the command line", got)
	}
}

// TestRequestedEarly checks that a kpreload.load= driver without its device
// (NVIDIA's module on a machine whose GPU is not there, as in a benchmark
// under QEMU) loads with the early decision before the root is there, and
// after the root mount when the decision waits for the root.
func TestRequestedEarly(t *testing.T) {
	tests := []struct {
		name      string
		complete  bool
		phase     string
		event     string
		beforeFor bool // the root appears only once nvidia was asked for
	}{
		{"early decision: loaded while the root is not there yet", true, "initramfs-early", "initramfs-early: loading nvidia (kpreload.load)", true},
		{"decision after the root: loaded after its mount", false, "initramfs", "initramfs: loading nvidia (kpreload.load)", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, "")
			f.initSets = []testSet{nvidia("550.163.01", "open")}
			f.complete = tt.complete
			f.cmdline = "kpreload.load=nvidia"
			if tt.beforeFor {
				f.sys.rootAfterLoad = "nvidia"
			}
			o := f.boot()
			if o.written == nil || o.written.Root.Mounted == 0 {
				t.Fatalf("the root was never mounted; events:\n%v\nconsole:\n%s", o.rep.Events, o.console)
			}
			mods := o.module("nvidia")
			if len(mods) != 1 {
				t.Fatalf("nvidia entries %+v, want one", mods)
			}
			m, mounted := mods[0], o.written.Root.Mounted
			before := m.End <= mounted
			if got, want := fmt.Sprintf("%s %s before root %v", m.Phase, m.Errno, before), fmt.Sprintf("%s ENODEV before root %v", tt.phase, tt.complete); got != want {
				t.Errorf("nvidia %q (start %.3f, end %.3f, root mounted %.3f), want %q", got, m.Start, m.End, mounted, want)
			}
			if !strings.Contains(o.events(), tt.event) {
				t.Errorf("events lack %q:\n%s", tt.event, o.events())
			}
			if n := strings.Count(o.events(), "loading nvidia (kpreload.load)"); n != 1 {
				t.Errorf("nvidia asked for %d times, want once:\n%s", n, o.events())
			}
		})
	}
}

// TestRootWait checks how /init waits for a root that is not there yet:
// woken by the kernel's device events (or after rootRecheck), listening
// only once the first look failed and looking once more right after it
// began; looking every rootPoll where it cannot listen.
func TestRootWait(t *testing.T) {
	tests := []struct {
		name      string
		findAfter int
		eventsErr error
		// want is the wait's event, waits the pauses asked for, stops the
		// listenings ended.
		want         string
		waits, stops int
	}{
		{"there at once: no listening", 0, nil, "", 0, 0},
		// The first failed look starts the listening, the second comes at
		// once, the third and fourth after a wait each.
		{"appears after three lookups", 3, nil, "root wait: woken by the kernel's device events, looking again after 500ms at most", 2, 1},
		{"no device events: polled", 3, unix.EPROTONOSUPPORT, "root wait: looking every 20ms: protocol not supported", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, "")
			f.sys.findAfter, f.sys.eventsErr = tt.findAfter, tt.eventsErr
			o := f.boot()
			if o.written == nil || o.written.Root.Device != f.path("dev/vda2") {
				t.Fatalf("root %+v; want it found", o.written)
			}
			events := o.events()
			if got := strings.Count(events, "root wait: "); tt.want == "" && got != 0 || tt.want != "" && !strings.Contains(events, tt.want) {
				t.Errorf("events:\n%s\nwant %q", events, tt.want)
			}
			if len(o.sys.waits) != tt.waits || o.sys.stops != tt.stops || o.sys.finds != tt.findAfter+1 {
				t.Errorf("waits %v, %d stops, %d lookups; want %d waits of %s, %d stops, %d lookups",
					o.sys.waits, o.sys.stops, o.sys.finds, tt.waits, rootRecheck, tt.stops, tt.findAfter+1)
			}
			for _, w := range o.sys.waits {
				if w != rootRecheck {
					t.Errorf("a wait of %s, want %s", w, rootRecheck)
				}
			}
		})
	}
}
