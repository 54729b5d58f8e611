package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kpreload/kpreload/testsupport/testenv"

	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/initramfs/assemble"
	"github.com/kpreload/kpreload/initramfs/pid1"
	"github.com/kpreload/kpreload/report"
)

var (
	twoVersionsOnce  sync.Once
	twoVersionsCache string
	twoVersionsErr   string
)

// twoVersions builds the test driver's two versions (recipes/testdriver.yaml,
// 1.0.0, and recipes/testdriver-2.yaml, 2.0.0) for kver with the real dkms, through
// `kpreload build`, into a fresh module cache, once per test run.
func twoVersions(t testing.TB, kver string) string {
	t.Helper()
	twoVersionsOnce.Do(func() {
		testenv.KernelTree(t, kver)
		bin := kpreloadBinary(t)
		dir, err := os.MkdirTemp("", "kpreload-e2e-2v-")
		if err != nil {
			twoVersionsErr = err.Error()
			return
		}
		twoVersionsCache = filepath.Join(dir, "cache")
		ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 15*time.Minute))
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "build", "recipes/testdriver.yaml", "recipes/testdriver-2.yaml", "--kernel", kver, "--cache", twoVersionsCache)
		cmd.Dir = testenv.RepoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			twoVersionsErr = "kpreload build: " + err.Error() + "\n" + string(out)
		}
	})
	if twoVersionsErr != "" {
		t.Fatal(twoVersionsErr)
	}
	return twoVersionsCache
}

// selectBoot is one boot of the 6.1 kernel with both test driver versions cached.
type selectBoot struct {
	// onRoot keeps the cache on the root filesystem instead of the initramfs.
	onRoot bool
	// instance, when set, is passed through fw_cfg as kpreload boot --instance does.
	instance string
	// imageInstance, when set, is baked into the root as /etc/kpreload/instance.yaml.
	imageInstance string
	// append is added to the kernel command line.
	append string
	// cache, when set, replaces the two-version cache.
	cache string
	// complete marks the initramfs index complete (the early decision).
	complete bool
	// drives are more disks on virtio after the root (a cloud-init seed).
	drives []string
}

func bootSelect(t *testing.T, c selectBoot) (booted, string) {
	t.Helper()
	kver := kernels[0]
	cache := c.cache
	if cache == "" {
		cache = twoVersions(t, kver)
	}
	dir := t.TempDir()
	ktree := testenv.KernelTree(t, kver)
	initBin, _ := binaries(t)
	o := assemble.Options{Kernel: kver, ModulesDir: filepath.Join(ktree, "lib", "modules", kver), Init: initBin, Complete: c.complete}
	// The image carries userspace directories for both versions, so /init can
	// point /run/kpreload/driver at the chosen one.
	drivers := filepath.Join(dir, "drivers")
	for _, v := range []string{"1.0.0", "2.0.0"} {
		if err := os.MkdirAll(filepath.Join(drivers, v), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(drivers, v, "VERSION"), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	extra := map[string]string{"/opt/kpreload/drivers": drivers}
	if c.imageInstance != "" {
		etc := filepath.Join(dir, "etc-kpreload")
		if err := os.MkdirAll(etc, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(etc, "instance.yaml"), []byte(c.imageInstance), 0o644); err != nil {
			t.Fatal(err)
		}
		extra["/etc/kpreload"] = etc
	}
	if c.onRoot {
		extra["/var/lib/kpreload/cache"] = cache
	} else {
		o.CacheDir = cache
	}
	initrd := sharedInitramfs(t, o)
	disk := rootDisk(t, dir, rootUUID, extra)
	cfg := qemu.Config{
		Kernel:     filepath.Join(ktree, "boot", "vmlinuz-"+kver),
		Initramfs:  initrd,
		RootDisk:   disk,
		Devices:    []string{"edu"},
		Append:     strings.TrimSpace("root=UUID=" + rootUUID + " " + c.append),
		Timeout:    testenv.Deadline(t, 4*time.Minute),
		ConsoleLog: filepath.Join(dir, "console.log"),
		Drives:     c.drives,
	}
	if c.instance != "" {
		f := filepath.Join(dir, "instance.yaml")
		if err := os.WriteFile(f, []byte(c.instance), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg.FwCfg = map[string]string{instance.FwCfgName: f}
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 5*time.Minute))
	defer cancel()
	res, err := qemu.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("boot: %v", err)
	}
	con, _ := os.ReadFile(res.Console)
	if res.Report == nil || res.RootInit == nil {
		t.Fatalf("boot: report %v, root init %v; console:\n%s", res.Report != nil, res.RootInit != nil, tailFile(res.Console, 40))
	}
	t.Logf("%s", res.Report.Summary())
	return booted{res: res, rep: res.Report, root: res.RootInit}, string(con)
}

// eduLines returns the test driver's "bound" kernel log lines.
func eduLines(root *report.RootInit) []string {
	var out []string
	for _, l := range root.Kmsg {
		if strings.Contains(l.Text, "kpreload_edu") && strings.Contains(l.Text, "bound, id") {
			out = append(out, l.Text)
		}
	}
	return out
}

// checkChosen checks that exactly version of the test driver was chosen, loaded
// from the expected place, bound, and activated.
func checkChosen(t *testing.T, b booted, con, version, source, phase string) {
	t.Helper()
	sel := b.rep.Selection
	if sel == nil {
		t.Fatalf("report has no selection section")
	}
	if sel.Source != source {
		t.Errorf("selection source %q (%s), want %q", sel.Source, sel.Origin, source)
	}
	if len(sel.Drivers) != 1 || sel.Drivers[0].Driver != "kpreload-edu" {
		t.Fatalf("selection drivers %+v, want kpreload-edu only", sel.Drivers)
	}
	dd := sel.Drivers[0]
	if dd.Chosen == nil || dd.Chosen.Version != version || dd.Chosen.From != phase || !dd.Loaded || !dd.Active {
		t.Errorf("kpreload-edu decision %+v (chosen %+v), want %s from %s, loaded and active", dd, dd.Chosen, version, phase)
	}
	if dd.Userspace != "/opt/kpreload/drivers/"+version {
		t.Errorf("userspace %q, want /opt/kpreload/drivers/%s", dd.Userspace, version)
	}
	// What the real init sees after switch_root: the link and the ready record.
	if got, want := b.root.DriverLink, "/opt/kpreload/drivers/"+version; got != want {
		t.Errorf("/run/kpreload/driver after switch_root -> %q, want %q", got, want)
	}
	var ready struct{ Driver, Version string }
	if err := json.Unmarshal(b.root.Ready, &ready); err != nil || ready.Driver != "kpreload-edu" || ready.Version != version {
		t.Errorf("/run/kpreload/ready after switch_root = %s (%v), want kpreload-edu %s", b.root.Ready, err, version)
	}
	if len(dd.Candidates) != 2 {
		t.Errorf("candidates %+v, want both versions", dd.Candidates)
	}
	for _, c := range dd.Candidates {
		if c.Version != version && c.Excluded == "" {
			t.Errorf("candidate %s not excluded", c.Version)
		}
	}
	var edu []report.Module
	for _, m := range b.rep.Modules {
		if m.Name == "kpreload_edu" {
			edu = append(edu, m)
		}
	}
	if len(edu) != 1 || edu[0].Result != "loaded" || dd.Chosen == nil || edu[0].Set != dd.Chosen.ID || edu[0].Phase != phase {
		t.Errorf("kpreload_edu report entries %+v, want one, loaded from set %v in phase %s", edu, dd.Chosen, phase)
	}
	lines := eduLines(b.root)
	if len(lines) != 1 || !strings.Contains(lines[0], "bound, id 0x010000ed, driver version "+version) {
		t.Errorf("kernel log edu lines %q, want one saying driver version %s", lines, version)
	}
	if dev, ok := pciDriver(b.root, "1234:11e8"); !ok || dev.Driver != "kpreload_edu" {
		t.Errorf("edu device %+v, want bound to kpreload_edu", dev)
	}
	if want := "kpreload: kpreload-edu " + version + " open chosen"; !strings.Contains(con, want) {
		t.Errorf("console lacks %q", want)
	}
	if len(b.rep.Errors) != 0 {
		t.Errorf("report errors %q", b.rep.Errors)
	}
}

// TestBootSelectsDriverVersion boots with both versions of the test driver
// cached and an instance request delivered three ways: fw_cfg (kpreload boot
// --instance) choosing 2.0.0 from the initramfs; the kernel command line choosing
// 1.0.0 from the root's cache while fw_cfg asks 2.0.0 (the command line wins);
// and a request for an absent 3.0.0 baked into the image's /etc/kpreload/instance.yaml
// (the default, 2.0.0, loads; the report and console name the fault and its line)
// with an initramfs index marked complete and kpreload.early=0, which keeps the
// decision after the root mount (TestEarlyDecision's today's-order case).
func TestBootSelectsDriverVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU (-short)")
	}
	t.Run("fw_cfg 2.0.0 from the initramfs", func(t *testing.T) {
		b, con := bootSelect(t, selectBoot{instance: "resources:\n  driver:\n    version: 2.0.0\n    flavor: auto\n"})
		checkChosen(t, b, con, "2.0.0", instance.SourceFwCfg, "initramfs")
		// The initramfs index is not marked complete: the decision waited
		// for the root, and the report says why (TestEarlyDecision's case).
		checkNotComplete(t, b.rep)
		// fw_cfg was read through its I/O ports before the first coldplug:
		// qemu_fw_cfg does not load beside the root's storage modules.
		if m, ok := moduleResult(b.rep, "qemu_fw_cfg"); ok {
			t.Errorf("qemu_fw_cfg %+v in the report, want it not loaded (fw_cfg read through its ports)", m)
		}
		if b.rep.Selection.Origin != pid1.FwCfgPortsOrigin {
			t.Errorf("origin %q, want %s", b.rep.Selection.Origin, pid1.FwCfgPortsOrigin)
		}
	})
	t.Run("fw_cfg 2.0.0 through qemu_fw_cfg (kpreload.fwcfg=module)", func(t *testing.T) {
		b, con := bootSelect(t, selectBoot{append: "kpreload.fwcfg=module", instance: "resources:\n  driver:\n    version: 2.0.0\n"})
		checkChosen(t, b, con, "2.0.0", instance.SourceFwCfg, "initramfs")
		// fw_cfg came through qemu_fw_cfg, which coldplug loaded from the kernel's set.
		if m, ok := moduleResult(b.rep, "qemu_fw_cfg"); !ok || m.Result != "loaded" || m.End > b.rep.Selection.Time {
			t.Errorf("qemu_fw_cfg %+v, want loaded before the selection at %.3f", m, b.rep.Selection.Time)
		}
		if b.rep.Selection.Origin != instance.FwCfgPath {
			t.Errorf("origin %q, want %s", b.rep.Selection.Origin, instance.FwCfgPath)
		}
	})
	t.Run("cmdline 1.0.0 from the root cache beats fw_cfg", func(t *testing.T) {
		b, con := bootSelect(t, selectBoot{onRoot: true, append: "kpreload.driver=1.0.0",
			instance: "resources:\n  driver:\n    version: 2.0.0\n"})
		checkChosen(t, b, con, "1.0.0", instance.SourceCmdline, "rootfs")
	})
	t.Run("absent 3.0.0 from the image goes on with the default", func(t *testing.T) {
		b, con := bootSelect(t, selectBoot{imageInstance: "resources:\n  driver:\n    version: 3.0.0\n",
			complete: true, append: "kpreload.early=0"})
		// kpreload.early=0: with the index marked complete, the decision
		// still waits for the root (phase initramfs, not initramfs-early),
		// and the events say why; the root's file is what it reads.
		if events := strings.Join(eventTexts(b.rep), "\n"); !strings.Contains(events, "driver decision after the root mount: kpreload.early=0") {
			t.Errorf("with kpreload.early=0: events %q; want today's order", events)
		}
		checkChosen(t, b, con, "2.0.0", instance.SourceImage, "initramfs")
		sel := b.rep.Selection
		if sel.Origin != "/newroot/"+instance.ImagePath {
			t.Errorf("selection origin %q, want /newroot/%s", sel.Origin, instance.ImagePath)
		}
		// The fault and its source, file:line, in the report and on the console.
		want := "asked version 3.0.0 (image /newroot/" + instance.ImagePath + ":3), which this image does not hold (it holds 2.0.0, 1.0.0): going on with the default, the latest qualifying version, flavour auto"
		if dd := sel.Drivers[0]; dd.Fallback != want || dd.Rule != "latest" {
			t.Errorf("fallback %q, rule %q\nwant     %q, latest", dd.Fallback, dd.Rule, want)
		}
		if !strings.Contains(con, "kpreload: warning: kpreload-edu: "+want) {
			t.Errorf("console lacks the fallback %q", want)
		}
	})
}
