package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/builder/rootdisk"
	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/initramfs/assemble"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/report"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// fault is one row of the campaign: a boot with one injected fault.
type fault struct {
	name string
	// cache, when set, makes the root's module cache (default: both test
	// driver versions, built by the real dkms).
	cache func(t *testing.T) string
	// extraModules are module files added to the initramfs as they are.
	extraModules func(t *testing.T) []string
	append       string
	fwcfg        string // instance YAML through fw_cfg
	image        string // /etc/kpreload/instance.yaml on the root
	noInit       bool   // the root has no /sbin/init
	lateRoot     bool   // the root disk is plugged in once /init says it waits for it
	noRoot       bool   // root= names a disk that never appears
	root         string // root=, when not UUID=rootUUID
	// until ends a boot that never reaches a root init.
	until *regexp.Regexp
	// check returns the outcome and the reason the boot shows, or fails.
	check func(t *testing.T, res *qemu.Result, con string) (outcome, reason string)
}

// eduEntry returns the report's first kpreload_edu entry.
func eduEntry(t *testing.T, rep *report.Report) report.Module {
	t.Helper()
	e := eduEntries(rep)
	if len(e) == 0 {
		t.Fatalf("the report has no kpreload_edu entry: %+v", rep.Modules)
	}
	return e[0]
}

// reachedInit fails unless the root's init ran; it returns "reached /sbin/init at T".
func reachedInit(t *testing.T, res *qemu.Result) string {
	t.Helper()
	if res.Report == nil || res.RootInit == nil {
		t.Fatalf("the boot did not reach the root's /sbin/init (report %v, root init %v)", res.Report != nil, res.RootInit != nil)
	}
	return fmt.Sprintf("/sbin/init ran at %.1fs", res.RootInit.Start)
}

// copyCache copies the two-version cache so a row can damage its copy.
func copyCache(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "cache")
	if out, err := exec.Command("cp", "-a", twoVersions(t, kernels[0]), dst).CombinedOutput(); err != nil {
		t.Fatalf("copy the cache: %v\n%s", err, out)
	}
	return dst
}

// moduleObject returns the path, in the cache's object store, of the first
// module of version's set (moduleFromCache copies the one module out).
func moduleObject(t *testing.T, cache, version string) string {
	t.Helper()
	st, err := store.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	ents, err := st.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Version == version {
			m, err := st.Get(e.ID)
			if err != nil {
				t.Fatal(err)
			}
			return st.ObjectPath(m.Modules[0].SHA256)
		}
	}
	t.Fatalf("no set of version %s in %s", version, cache)
	return ""
}

// firmwareCache builds the test driver with a declared firmware file that no
// image carries (MODULE_FIRMWARE("kpreload/edu-missing.bin")).
func firmwareCache(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("cp", "-rL", filepath.Join(testenv.RepoRoot(t), "recipes", "testdriver"), filepath.Join(dir, "testdriver")).CombinedOutput(); err != nil {
		t.Fatalf("copy the test driver: %v\n%s", err, out)
	}
	src := filepath.Join(dir, "testdriver", "kpreload_edu.c")
	code, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	code = append(code, []byte("MODULE_FIRMWARE(\"kpreload/edu-missing.bin\");\n")...)
	if err := os.WriteFile(src, code, 0o644); err != nil {
		t.Fatal(err)
	}
	yml, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "recipes", "testdriver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	recipe := filepath.Join(dir, "testdriver-fw.yaml")
	if err := os.WriteFile(recipe, []byte(strings.Replace(string(yml), "name: testdriver\n", "name: testdriver-fw\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := kpreloadBinary(t)
	cache := filepath.Join(dir, "cache")
	if out, err := exec.Command(bin, "build", recipe+":"+kernels[0], "--cache", cache).CombinedOutput(); err != nil {
		t.Fatalf("kpreload build: %v\n%s", err, out)
	}
	return cache
}

// bootFault boots kernels[0] with the fault injected.
func bootFault(t *testing.T, f fault) (*qemu.Result, string) {
	t.Helper()
	kver := kernels[0]
	dir := t.TempDir()
	ktree := testenv.KernelTree(t, kver)
	initBin, rootInit := binaries(t)
	o := assemble.Options{Kernel: kver, ModulesDir: filepath.Join(ktree, "lib", "modules", kver), Init: initBin}
	if f.extraModules != nil {
		o.ExtraFiles = f.extraModules(t)
	}
	initrd := sharedInitramfs(t, o)
	cache := ""
	if f.cache != nil {
		cache = f.cache(t)
	} else {
		cache = twoVersions(t, kver)
	}
	extra := map[string]string{"/var/lib/kpreload/cache": cache}
	if f.image != "" {
		etc := filepath.Join(dir, "etc-kpreload")
		if err := os.MkdirAll(etc, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(etc, "instance.yaml"), []byte(f.image), 0o644); err != nil {
			t.Fatal(err)
		}
		extra["/etc/kpreload"] = etc
	}
	disk := filepath.Join(dir, "root.img")
	ro := rootdisk.Options{Out: disk, SizeMB: 64, UUID: rootUUID, Label: "kpreload-root", Init: rootInit, Extra: extra}
	if f.noInit {
		ro.Init, ro.NoInit = "", true
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 6*time.Minute))
	defer cancel()
	if err := rootdisk.Build(ctx, ro); err != nil {
		t.Fatalf("root disk: %v", err)
	}
	root := "root=UUID=" + rootUUID
	if f.root != "" {
		root = "root=" + f.root
	}
	if f.noRoot {
		root = "root=UUID=0b7c6a52-0000-4000-8000-00000000dead"
	}
	cfg := qemu.Config{
		Kernel:     filepath.Join(ktree, "boot", "vmlinuz-"+kver),
		Initramfs:  initrd,
		RootDisk:   disk,
		Devices:    []string{"edu"},
		Append:     strings.TrimSpace(root + " " + f.append),
		Timeout:    testenv.Deadline(t, 3*time.Minute),
		ConsoleLog: filepath.Join(dir, "console.log"),
		Until:      f.until,
	}
	if f.noRoot {
		cfg.RootDisk = ""
	}
	if f.fwcfg != "" {
		p := filepath.Join(dir, "instance.yaml")
		if err := os.WriteFile(p, []byte(f.fwcfg), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg.FwCfg = map[string]string{instance.FwCfgName: p}
	}
	var plugged chan error
	runCtx, stopPlug := context.WithCancel(ctx)
	defer stopPlug()
	if f.lateRoot {
		cfg.RootDisk = ""
		cfg.MonitorSocket = filepath.Join(dir, "monitor.sock")
		plugged = make(chan error, 1)
		go func() {
			// Plugged in once /init says it is waiting for the root (it
			// says so after 5 s of waiting), however late a loaded host
			// brought the kernel to /init.
			if err := waitConsoleText(runCtx, cfg.ConsoleLog, waitingForRoot); err != nil {
				plugged <- fmt.Errorf("the console never showed %q: %w", waitingForRoot, err)
				return
			}
			ans, err := qemu.Monitor(cfg.MonitorSocket,
				"drive_add 0 if=none,id=late,format=raw,file="+disk,
				"device_add virtio-blk-pci,drive=late,bus="+qemu.HotplugBus)
			if err == nil && strings.Contains(strings.Join(ans, " "), "Error") {
				err = fmt.Errorf("monitor answered %q", ans)
			}
			plugged <- err
		}()
	}
	res, err := qemu.Run(ctx, cfg)
	stopPlug()
	if plugged != nil {
		if perr := <-plugged; perr != nil {
			t.Fatalf("plug the root disk in: %v (boot: %v)", perr, err)
		}
	}
	con := ""
	if res != nil {
		b, _ := os.ReadFile(res.Console)
		con = string(b)
	}
	if err != nil {
		t.Fatalf("boot: %v", err)
	}
	if res.Panicked {
		t.Fatalf("the kernel panicked: %s", res.PanicLine)
	}
	return res, con
}

// TestFaultCampaign boots the 6.1 cloud kernel once per injected fault and
// checks that every boot reaches the root's /sbin/init (or, with no root to
// reach, keeps saying why and never panics) and that the report names the
// fault. The table of fault, outcome and reason is printed in the log.
// Faults that cannot hide one another share a boot (bad requests from three
// sources; a fallback in the decision and a failing init in the loader). A
// module whose init blocks and an unsigned module under module.sig_enforce=1
// are booted by TestLoadDeadline and TestSignatureEnforcement/unsigned.
func TestFaultCampaign(t *testing.T) {
	if testing.Short() {
		t.Skip("QEMU boots; -short")
	}
	rows := []fault{
		{name: "module file with a flipped byte (digest)", cache: func(t *testing.T) string {
			c := copyCache(t)
			obj := moduleObject(t, c, "2.0.0")
			b, err := os.ReadFile(obj)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x01
			os.Chmod(obj, 0o644)
			if err := os.WriteFile(obj, b, 0o444); err != nil {
				t.Fatal(err)
			}
			return c
		}, check: func(t *testing.T, res *qemu.Result, con string) (string, string) {
			e := eduEntry(t, res.Report)
			if e.Result != "refused" || !strings.Contains(e.Reason, "digest mismatch") {
				t.Errorf("kpreload_edu %+v, want refused for its digest", e)
			}
			return "refused, " + reachedInit(t, res), e.Reason
		}},
		// The test driver built for 6.12 in the 6.1 initramfs (and root= by
		// device name): /init must refuse it before calling the kernel (the
		// kernel log never mentions it), say why, and still boot to /sbin/init.
		{name: "module built for another kernel (vermagic)", cache: func(t *testing.T) string { return t.TempDir() },
			extraModules: func(t *testing.T) []string { return []string{eduModule(t, kernels[1], "")} },
			root:         "/dev/vda",
			check: func(t *testing.T, res *qemu.Result, con string) (string, string) {
				e := eduEntry(t, res.Report)
				if e.Result != "refused" || !strings.Contains(e.Reason, "vermagic mismatch") {
					t.Errorf("kpreload_edu %+v, want refused for its vermagic", e)
				}
				if want := "built for kernel " + kernels[1] + ", running " + kernels[0]; !strings.Contains(e.Reason, want) {
					t.Errorf("refusal reason %q, want it to say %q", e.Reason, want)
				}
				outcome := "refused, " + reachedInit(t, res)
				root := res.RootInit
				for _, l := range root.Kmsg {
					if strings.Contains(l.Text, "kpreload_edu") {
						t.Errorf("kernel log mentions the refused module, so it reached the kernel: %q", l.Text)
					}
				}
				if slices.Contains(root.Modules, "kpreload_edu") {
					t.Errorf("kpreload_edu is loaded: %v", root.Modules)
				}
				if edu, _ := pciDriver(root, "1234:11e8"); edu.Driver != "" {
					t.Errorf("edu bound to %q, want unbound", edu.Driver)
				}
				if root.PID != 1 {
					t.Errorf("root init pid %d, want 1: the boot must reach the real init", root.PID)
				}
				return outcome, e.Reason
			}},
		{name: "declared firmware missing", cache: firmwareCache, check: func(t *testing.T, res *qemu.Result, con string) (string, string) {
			e := eduEntry(t, res.Report)
			w := strings.Join(res.Report.Warnings, "\n")
			if len(e.MissingFirmware) != 1 || !strings.Contains(w, "declares firmware kpreload/edu-missing.bin") {
				t.Errorf("kpreload_edu %+v, warnings %q: want the missing firmware named", e, w)
			}
			return e.Result + " (the kernel decides), " + reachedInit(t, res), firstLine(w, "firmware")
		}},
		{name: "corrupt root cache index", cache: func(t *testing.T) string {
			c := copyCache(t)
			if err := os.WriteFile(filepath.Join(c, "index", kernels[0]+".json"), []byte("{not json"), 0o644); err != nil {
				t.Fatal(err)
			}
			return c
		}, check: func(t *testing.T, res *qemu.Result, con string) (string, string) {
			errs := strings.Join(res.Report.Errors, "\n")
			if !strings.Contains(errs, "boot index") || len(eduEntries(res.Report)) != 0 {
				t.Errorf("errors %q, edu %+v: want the index named and nothing loaded", errs, eduEntries(res.Report))
			}
			return "no driver loaded, " + reachedInit(t, res), firstLine(errs, "boot index")
		}},
		// Three bad requests, one per source the initramfs reads (the
		// command line, fw_cfg, the image's file): each is skipped with an
		// error naming its source, and the default is used.
		{name: "garbage base64 on the command line, bad YAML through fw_cfg, bad /etc/kpreload/instance.yaml",
			append: "kpreload.instance=%%%not-base64%%%", fwcfg: "resources: [\n", image: "resources:\n  driver:\n    version: newest\n",
			check: func(t *testing.T, res *qemu.Result, con string) (string, string) {
				errs := selectionErrors(res.Report)
				if !strings.Contains(errs, "kernel command line") {
					t.Errorf("selection errors %q do not name the command line", errs)
				}
				if !strings.Contains(errs, "fw_cfg") {
					t.Errorf("selection errors %q do not name fw_cfg", errs)
				}
				if !strings.Contains(errs, "/etc/kpreload/instance.yaml:3") {
					t.Errorf("selection errors %q do not name the file and line", errs)
				}
				return "3 requests skipped, default used, " + reachedInit(t, res), strings.ReplaceAll(errs, "\n", "; ")
			}},
		// A request for an absent version (the decision falls back to the
		// default) and a module whose init fails (the loader): one fault in
		// each stage.
		{name: "instance asks for an absent version; module whose init fails", append: "kpreload.driver=3.0.0 kpreload_edu.init_errno=5", check: func(t *testing.T, res *qemu.Result, con string) (string, string) {
			e := eduEntry(t, res.Report)
			if e.Result != "failed" || e.Errno != "EIO" {
				t.Errorf("kpreload_edu %+v, want failed with EIO", e)
			}
			sel := res.Report.Selection
			want := "asked version 3.0.0 (cmdline kpreload.driver=3.0.0), which this image does not hold (it holds 2.0.0, 1.0.0): going on with the default"
			if sel == nil || len(sel.Drivers) != 1 || sel.Drivers[0].Chosen == nil || sel.Drivers[0].Chosen.Version != "2.0.0" || !strings.HasPrefix(sel.Drivers[0].Fallback, want) {
				t.Fatalf("selection %+v, want the default 2.0.0 chosen and a fallback starting %q", sel, want)
			}
			return "the default 2.0.0 chosen, failed " + e.Errno + ", " + reachedInit(t, res), sel.Drivers[0].Fallback + "; " + e.Reason
		}},
		{name: "root disk appears only once /init waits for it", lateRoot: true, check: func(t *testing.T, res *qemu.Result, con string) (string, string) {
			r := res.Report.Root
			// Plugged in once the console said /init was waiting for it,
			// which it says after 5 s of waiting.
			waited := r.Mounted - res.Report.InitStart
			if waited < 5 || !strings.Contains(con, waitingForRoot) {
				t.Errorf("root %+v, /init started at %.2fs: want it mounted after waiting over 5 s for the late plug-in, and the waiting message", r, res.Report.InitStart)
			}
			return fmt.Sprintf("root mounted at %.1fs after %.1fs of waiting, %s", r.Mounted, waited, reachedInit(t, res)), firstLine(con, waitingForRoot)
		}},
		{name: "root never appears", noRoot: true, until: regexp.MustCompile(`(?s)(kpreload: waiting for root.*){3}`), check: func(t *testing.T, res *qemu.Result, con string) (string, string) {
			if n := strings.Count(con, "kpreload: waiting for root"); n < 3 || res.RootInit != nil {
				t.Errorf("%d waiting messages, root init %v", n, res.RootInit != nil)
			}
			return fmt.Sprintf("no panic; the console repeats the wait (%d times in %s)", strings.Count(con, "kpreload: waiting for root"), res.Duration.Round(time.Second)), firstLine(con, "kpreload: waiting for root")
		}},
		{name: "root without /sbin/init", noInit: true, until: regexp.MustCompile(`kpreload: cannot continue booting`), check: func(t *testing.T, res *qemu.Result, con string) (string, string) {
			errs := ""
			if res.Report != nil {
				errs = strings.Join(res.Report.Errors, "\n")
			}
			if !strings.Contains(errs, "/sbin/init not found on root") || res.RootInit != nil {
				t.Errorf("report errors %q: want the missing init named", errs)
			}
			return "no panic; /init says why and waits", firstLine(con, "kpreload: cannot continue booting")
		}},
	}
	var table []string
	for _, f := range rows {
		t.Run(f.name, func(t *testing.T) {
			res, con := bootFault(t, f)
			outcome, reason := f.check(t, res, con)
			table = append(table, fmt.Sprintf("| %s | %s | %s |", f.name, outcome, strings.ReplaceAll(reason, "|", "/")))
		})
	}
	t.Logf("fault campaign:\n| fault | outcome | reason seen |\n| --- | --- | --- |\n%s", strings.Join(table, "\n"))
}

// waitingForRoot is what /init's console says once it has waited 5 s for
// the root device.
const waitingForRoot = "kpreload: waiting for root"

// waitConsoleText waits until the console log file holds text.
func waitConsoleText(ctx context.Context, file, text string) error {
	for {
		if b, _ := os.ReadFile(file); strings.Contains(string(b), text) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// selectionErrors joins the selection's request errors.
func selectionErrors(rep *report.Report) string {
	if rep == nil || rep.Selection == nil {
		return ""
	}
	return strings.Join(rep.Selection.Errors, "\n")
}

// firstLine returns the first line of s containing sub (any line when sub is "").
func firstLine(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return strings.TrimSpace(strings.TrimRight(l, "\r"))
		}
	}
	return ""
}
